"""The CLI's commands at short horizons: the main job `ukjax scara`, the coordinated robots' control
demo (each with its animation beside its plot) and the identification demo `ukjax fit` (the
closed chain's identification is checked here)."""

import re

from PIL import Image

from ukjax._cli import main


def test_scara_main_job(tmp_path, capsys):
    out = tmp_path / "scara.png"
    main(["scara", "--t1", "2", "--saves", "21", "--batch", "4", "--quiet", "--out", str(out)])
    text = capsys.readouterr().out
    z_errors = [float(z) for z in re.findall(r"z ([+-]\d\.\d+e[+-]\d+) m", text)]
    assert abs(z_errors[0] + 0.0005 * 2) < 1e-9  # seed 001: z error 0.0005 t without stabilization
    assert abs(z_errors[1]) < 1e-2 * abs(z_errors[0])
    assert "succeeded 4/4" in text
    assert out.stat().st_size > 10_000
    assert Image.open(out.with_suffix(".gif")).n_frames == 21  # the stabilized run, every save


def test_coordinated_control_demo(tmp_path, capsys):
    out = tmp_path / "coordinated.png"
    main(["coordinated", "--t1", "0.5", "--saves", "11", "--quiet", "--out", str(out)])
    text = capsys.readouterr().out
    errors = [float(e) for e in re.findall(r"object tracking error (\d\.\d+e[+-]\d+)", text)]
    assert errors[0] < 1e-8 < errors[1]  # exact tracks, the seed's formula does not
    assert out.stat().st_size > 10_000
    assert Image.open(out.with_suffix(".gif")).n_frames == 11


def test_fit_demo(tmp_path, capsys):
    out = tmp_path / "fit.png"
    main(["fit", "--horizon", "0.5", "--closed-horizon", "0.25", "--quiet", "--out", str(out)])
    text = capsys.readouterr().out
    ranks = re.findall(r"rank (\d+)/(\d+)", text)
    assert ranks == [("4", "4"), ("9", "10")]
    # the closed chain: one combination not determined, named; everything else recovered
    assert text.count("not determined (relative changes)") == 1
    costs = [float(c) for c in re.findall(r"cost (\d\.\d+e[+-]\d+)", text)]
    errors = [float(e) for e in re.findall(r"what the data determine: (\d\.\d+e[+-]\d+)", text)]
    assert len(costs) == len(errors) == 2 and max(costs) < 1e-20 and max(errors) < 1e-6, (costs, errors)
    assert out.stat().st_size > 10_000
