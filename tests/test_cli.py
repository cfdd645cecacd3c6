"""The CLI's commands at short horizons: the main job `ukjax scara`, the coordinated robots' control
demo (each with its animation beside its plot), the identification demo `ukjax fit` (the
closed chain's identification is checked here) and `ukjax simulate` on a free-joint model and on
Cassie, with its errors and exit statuses."""

import argparse
import re
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image

import ukjax
from ukjax import models
from ukjax.cli.main import main


@pytest.mark.long
def test_scara_main_job(tmp_path, capsys):
    out = tmp_path / "scara.png"
    main(["--no-cache", "scara", "--t1", "2", "--saves", "21", "--batch", "4", "--out", str(out)])
    text = capsys.readouterr().out
    z_errors = [float(z) for z in re.findall(r"z ([+-]\d\.\d+e[+-]\d+) m", text)]
    assert abs(z_errors[0] + 0.0005 * 2) < 1e-9  # seed 001: z error 0.0005 t without stabilization
    assert abs(z_errors[1]) < 1e-2 * abs(z_errors[0])
    assert "succeeded 4/4" in text
    assert out.stat().st_size > 10_000
    assert Image.open(out.with_suffix(".gif")).n_frames == 21  # the stabilized run, every save


@pytest.mark.long
def test_coordinated_control_demo(tmp_path, capsys):
    out = tmp_path / "coordinated.png"
    main(["--no-cache", "coordinated", "--t1", "0.5", "--saves", "11", "--out", str(out)])
    text = capsys.readouterr().out
    errors = [float(e) for e in re.findall(r"object tracking error (\d\.\d+e[+-]\d+)", text)]
    assert errors[0] < 1e-8 < errors[1]  # exact tracks, the seed's formula does not
    assert out.stat().st_size > 10_000
    assert Image.open(out.with_suffix(".gif")).n_frames == 11


@pytest.mark.long
def test_fit_demo(tmp_path, capsys):
    out = tmp_path / "fit.png"
    main(["--no-cache", "fit", "--horizon", "0.5", "--closed-horizon", "0.25", "--quiet", "--out", str(out)])
    text = capsys.readouterr().out
    ranks = re.findall(r"rank (\d+)/(\d+)", text)
    assert ranks == [("4", "4"), ("9", "10")]
    # the closed chain: one combination not determined, named; everything else recovered
    assert text.count("not determined (relative changes)") == 1
    costs = [float(c) for c in re.findall(r"cost (\d\.\d+e[+-]\d+)", text)]
    errors = [float(e) for e in re.findall(r"what the data determine: (\d\.\d+e[+-]\d+)", text)]
    assert len(costs) == len(errors) == 2 and max(costs) < 1e-20 and max(errors) < 1e-6, (costs, errors)
    assert out.stat().st_size > 10_000


CASSIE = Path(__file__).parent.parent.parent / "shared" / "robots" / "cassie.xml"
BOX = """<mujoco model="box"><option><flag contact="disable"/></option><worldbody>
  <body name="box" pos="0 0 1"><freejoint/><geom type="box" size="0.1 0.2 0.3" mass="2"/></body>
  </worldbody><keyframe><key name="spinning" qpos="0 0 1 1 0 0 0" qvel="1 0 2 3 1 -2"/></keyframe></mujoco>"""


def _simulate(argv, capsys):
    """`ukjax simulate ARGV`: its exit status (0 where it returned) and what it printed."""
    try:
        main(["--no-cache", "simulate", *argv])
        code = 0
    except SystemExit as exit:
        code = exit.code
    out = capsys.readouterr()
    return code, out.out + out.err


def test_simulate_a_free_joint_model(tmp_path, capsys, monkeypatch):
    """A one-body `<freejoint/>` box (which crashed the command): it runs, names its plot after
    the model, draws its animation, and the quaternion norm held is reported."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "box.xml").write_text(BOX)
    code, text = _simulate(["box.xml", "--keyframe", "spinning", "--t1", "0.2", "--saves", "5", "--gif", "box.gif"], capsys)
    assert code == 0, text
    assert "status SUCCESS" in text
    # every long stage says what it is doing, once
    # reading, compiling, simulating, the GIF
    assert text.count("compiling the simulation") == 1 and text.count("done in") == 4
    assert float(re.search(r"quaternion norm error (\d\.\d+e[+-]\d+)", text).group(1)) < 1e-8
    assert (tmp_path / "box.png").stat().st_size > 10_000
    assert Image.open(tmp_path / "box.gif").n_frames == 5


@pytest.mark.xdist_group("cassie")  # beside tests/test_cassie.py: the import's programs are compiled there
def test_simulate_cassie_as_the_readme_writes_it(tmp_path, capsys, monkeypatch):
    """The README's Cassie command, at a short horizon: it runs (it crashed), its loops stay
    closed and the files are named as asked."""
    monkeypatch.chdir(tmp_path)
    code, text = _simulate(
        [str(CASSIE), "--keyframe", "home", "--t1", "0.01", "--saves", "3", "--gif", "cassie.gif",
         "--no-contacts"],
        capsys,
    )
    assert code == 0, text
    assert float(re.search(r"max constraint violation (\d\.\d+e[+-]\d+)", text).group(1)) < 1e-8
    assert (tmp_path / "cassie.png").stat().st_size > 10_000
    assert Image.open(tmp_path / "cassie.gif").n_frames == 3


def test_simulate_says_what_is_wrong_and_exits_non_zero(tmp_path, capsys, monkeypatch):
    """An unknown keyframe lists the names there are; a horizon that is not a number is
    refused (it ran 100 000 steps); a run that does not end in SUCCESS (two contradictory
    equalities, which Baumgarte gains turn into contradictory accelerations) exits 1, so a
    script can tell."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "box.xml").write_text(BOX)
    code, text = _simulate(["box.xml", "--keyframe", "sitting"], capsys)
    assert code == 2 and "No keyframe 'sitting'; the model has 1: spinning" in text
    code, text = _simulate(["box.xml", "--t1", "nan"], capsys)
    assert code == 2 and "finite, positive" in text
    contradiction = BOX.replace(
        "</worldbody>",
        '<body name="arm" pos="1 0 0"><joint name="h" type="hinge"/><geom size="0.1" mass="1"/></body></worldbody>'
        '<equality><joint joint1="h" polycoef="0.1 0 0 0 0"/><joint joint1="h" polycoef="0.2 0 0 0 0"/></equality>',
    )
    (tmp_path / "contradiction.xml").write_text(contradiction)
    code, text = _simulate(["contradiction.xml", "--t1", "0.05", "--saves", "2", "--alpha", "10", "--beta", "100"], capsys)
    assert code == 1 and "INCONSISTENT_CONSTRAINTS" in text, text


def test_a_simulation_is_compiled_once_and_read_back_without_the_engine(tmp_path):
    """`ukjax simulate`'s compiled program is kept with its arguments under a key (the tree
    kernel's calls in it): a fresh process reads it back and runs it with the same results
    without importing equinox or diffrax (`import ukjax` imports neither); another key finds
    nothing. A kept program with LAPACK's calls in it (`ukjax fit`'s) runs in a fresh process
    too (jaxlib loads LAPACK where a program that calls it is lowered: without that, a crash)."""
    from ukjax.cli.cache import keep_program, read_program

    model = ukjax.models.from_mjcf(BOX, keyframe="spinning")
    ts = jnp.linspace(0.0, 0.2, 5)

    def simulation(q0, qd0):
        sol = ukjax.simulate(model.system, q0, qd0, 0.0, 0.2, ts=ts, throw=False)
        return {"q": sol.q, "status": sol.status}

    program, arguments = keep_program(tmp_path, "simulate", ("box",), simulation, (model.q0, model.qd0))
    first = program(*arguments)
    assert int(first["status"]) == ukjax.Status.SUCCESS
    assert len(list((tmp_path / "ukjax-programs").glob("simulate-*.pickle"))) == 1
    assert read_program(tmp_path, "simulate", ("box", "another")) is None
    np.save(tmp_path / "first.npy", np.asarray(first["q"]))
    pair = (np.array([[2.0, 1.0], [1.0, 3.0]]), np.array([1.0, 2.0]))
    keep_program(tmp_path, "solve", ("lapack",), lambda a, b: {"x": jnp.linalg.solve(a, b)}, pair)
    script = f"""
import sys
import jax
import numpy as np
from pathlib import Path
jax.config.update("jax_enable_x64", True)
from ukjax.cli.cache import read_program
program, arguments = read_program(Path({str(tmp_path)!r}), "simulate", ("box",))
again = program(*arguments)
np.testing.assert_array_equal(again["q"], np.load({str(tmp_path / "first.npy")!r}))
program, arguments = read_program(Path({str(tmp_path)!r}), "solve", ("lapack",))
np.testing.assert_allclose(program(*arguments)["x"], [0.2, 0.6], rtol=1e-14)
assert not {{"equinox", "diffrax", "ukjax._simulate"}} & set(sys.modules), sorted(sys.modules)
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_an_executable_from_jaxs_cache_is_run_and_not_kept(tmp_path):
    """An executable that JAX's persistent cache read back serializes without its compiled
    functions (jaxlib 0.10, CPU): `keep_program` keeps only one it compiled itself. A second
    process compiling the same program under another key, JAX's cache on, runs it and keeps
    nothing; the first one's kept program is read back and runs."""
    script = """
import sys
from pathlib import Path
import jax
import numpy as np
jax.config.update("jax_enable_x64", True)
jax.config.update("jax_compilation_cache_dir", sys.argv[1])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
from ukjax.cli.cache import keep_program, read_program
cache, key = Path(sys.argv[1]), sys.argv[2]
fun = lambda x: {"y": jax.numpy.sin(x) * 2}
program, args = keep_program(cache, "p", (key,), fun, (np.arange(3.0),))
np.testing.assert_allclose(program(*args)["y"], 2 * np.sin(np.arange(3.0)))
found = {k: read_program(cache, "p", (k,)) is not None for k in ("first", "second")}
print(found)
if key == "second":
    program, args = read_program(cache, "p", ("first",))
    np.testing.assert_allclose(program(*args)["y"], 2 * np.sin(np.arange(3.0)))
"""
    runs = [
        subprocess.run([sys.executable, "-c", script, str(tmp_path), key], capture_output=True, text=True)
        for key in ("first", "second")
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr
    assert runs[0].stdout.strip() == "{'first': True, 'second': False}"
    assert runs[1].stdout.strip() == "{'first': True, 'second': False}"


def test_a_model_is_read_once_and_kept(tmp_path, monkeypatch):
    """`ukjax simulate`'s model (its start projected onto the file's equalities) is kept under
    the key of MuJoCo's compiled binary: the same file is read back with the same start and
    the first reading's warnings said again; an edit of the file is read anew."""
    from ukjax._robots import mjcf
    from ukjax.cli import cache as _cache

    path = tmp_path / "coupled.xml"
    coupled = BOX.replace(
        "</worldbody>",
        '<body name="arm" pos="1 0 0"><joint name="h" type="hinge"/><geom size="0.1" mass="1"/></body></worldbody>'
        '<equality><joint joint1="h" polycoef="0.1 0 0 0 0"/></equality>',
    )
    path.write_text(coupled)
    with pytest.warns(UserWarning, match="it was projected onto them"):
        first = _cache.kept_model(tmp_path, str(path), "spinning")
    assert abs(float(first.q0[-1]) - 0.1) < 1e-12
    assert len(list((tmp_path / "ukjax-models").glob("coupled-*.pickle"))) == 1

    def read(*args):
        raise AssertionError("read anew")

    monkeypatch.setattr(mjcf, "_from_compiled", read)
    with pytest.warns(UserWarning, match="it was projected onto them"):
        again = _cache.kept_model(tmp_path, str(path), "spinning")
    np.testing.assert_array_equal(again.q0, first.q0)
    path.write_text(coupled.replace("0.1 0 0 0 0", "0.2 0 0 0 0"))
    with pytest.raises(AssertionError, match="read anew"):
        _cache.kept_model(tmp_path, str(path), "spinning")


def test_version_and_defaults_in_help(capsys):
    for argv in (["--version"], ["simulate", "--help"]):
        try:
            main(argv)
        except SystemExit as exit:
            assert exit.code == 0
    text = capsys.readouterr().out
    assert f"ukjax {ukjax.__version__}" in text
    assert "final time [s] (default: 5.0)" in text
    # an option whose help names its default is not given a second one
    assert "qpos0)" in text and "(default: None)" not in text


def test_compilation_cache_directory_and_its_switch(monkeypatch, tmp_path):
    """`UKJAX_CACHE_DIR` names the cache's directory and, empty, turns it off (as `--no-cache`)."""
    from ukjax.cli.cache import compilation_cache

    monkeypatch.setenv("UKJAX_CACHE_DIR", "")
    assert compilation_cache() is None
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("UKJAX_CACHE_DIR")
    previous = jax.config.jax_compilation_cache_dir
    try:
        assert compilation_cache() == tmp_path / "ukjax" / "jax"
        assert jax.config.jax_compilation_cache_dir == str(tmp_path / "ukjax" / "jax")
    finally:
        jax.config.update("jax_compilation_cache_dir", previous)


def test_the_library_never_imports_the_command_line():
    """Every public name and the models, imported in a fresh process, bring in no module of
    `ukjax.cli`."""
    script = """
import sys, ukjax, ukjax.models
for name in ukjax.__all__:
    getattr(ukjax, name)
print(sorted(m for m in sys.modules if m.startswith("ukjax.cli")))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_kept_simulation_runs_and_is_read_back(tmp_path, capsys, monkeypatch):
    """`ukjax simulate` with its cache on (the other tests turn it off): the program is kept
    and run, then read back and run again, with the same result."""
    (tmp_path / "box.xml").write_text(BOX)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("UKJAX_CACHE_DIR", str(tmp_path / "cache"))
    texts = []
    for _ in range(2):
        main(["simulate", "box.xml", "--keyframe", "spinning", "--t1", "0.05", "--saves", "3"])
        texts.append(capsys.readouterr().out)
    assert all("SUCCESS" in text for text in texts)
    final = [[line for line in text.splitlines() if "status" in line] for text in texts]
    assert final[0] == final[1] and final[0]


def test_simulate_a_files_contacts_by_time_stepping(tmp_path, capsys, monkeypatch):
    """`ukjax simulate FILE` on the contacts scene steps at the file's own timestep (its
    `<option timestep="0.0001"/>`), says so, and reports no penetration past round-off; `--events` takes the
    event-driven route and reports its events; `--step` and `--events` together are refused."""
    monkeypatch.chdir(tmp_path)
    scene = str(Path(__file__).parent.parent / "ukjax" / "examples" / "contacts.xml")
    code, text = _simulate([scene, "--keyframe", "launched", "--t1", "0.1", "--saves", "3"], capsys)
    assert code == 0, text
    assert "time-stepping at 0.0001 s" in text and "status SUCCESS, 1000 steps" in text
    assert float(re.search(r"largest penetration (\d\.\d+e[+-]\d+)", text).group(1)) < 1e-9
    code, text = _simulate(
        [scene, "--keyframe", "launched", "--t1", "0.1", "--saves", "3", "--events"], capsys
    )
    assert code == 0, text
    assert "Tsit5, rtol=atol=1e-10" in text and re.search(r"\d+ contact events", text)
    code, text = _simulate([scene, "--step", "0.001", "--events"], capsys)
    assert code == 2 and "not allowed with argument" in text


def test_the_command_lines_route():
    """`ukjax simulate`'s step: `--step`'s where given; the file's timestep where the run
    has limits or contacts; none (the event-driven or smooth route) with `--events`,
    `--no-contacts` or a file with neither."""
    from ukjax.cli.commands import _step

    def args(step=None, events=False, no_contacts=False):
        return argparse.Namespace(step=step, events=events, no_contacts=no_contacts)

    limited = models.from_mjcf(Path(__file__).parent.parent / "ukjax" / "examples" / "contacts.xml")
    smooth = models.from_mjcf(Path(__file__).parent.parent / "ukjax" / "examples" / "fourbar.xml")
    assert limited.timestep == 1e-4 and limited.unilateral
    assert _step(args(), limited) == 1e-4
    assert _step(args(step=5e-4), limited) == 5e-4 and _step(args(step=5e-4), smooth) == 5e-4
    assert _step(args(events=True), limited) is None
    assert _step(args(no_contacts=True), limited) is None
    assert _step(args(), smooth) is None
