"""`ukjax bench`'s last line takes both violations from one mechanism, and a peer that cannot
run a case is left out of it with a line that says why (MJX failed on the gripper under
float64 and took the benchmark down with it)."""

from ukjax.cli.bench import peer, summary


def test_summary_reads_both_violations_from_one_case():
    results = [("robots", 2.5, 1e-14, 1.4e-4), ("cassie", 0.4, 1e-10, 7.5e-5), ("gripper", 1.1, 1e-17, 5e-3)]
    line = summary(results, {})
    # ukjax's largest violation is Cassie's: MuJoCo's of Cassie beside it, not the gripper's 5e-3
    assert "violation ukjax 1.0e-10 mujoco 7.5e-05 (cassie)" in line
    assert line.startswith("throughput ratio ukjax/mujoco 0.40 (cassie)")
    assert line.endswith("ukjax failed members 0")


def test_a_peer_that_fails_is_left_out_with_its_reason(capsys):
    def failing(*args):
        raise TypeError("scan body function carry input and carry output must have equal types")

    def missing(*args):
        raise ImportError("No module named 'mujoco.mjx'")

    assert peer("gripper", "mjx", failing, 1, 2) is None
    assert peer("gripper", "mjx", missing) is None
    assert peer("gripper", "mjx", lambda a, b: (a, b), 1, 2) == (1, 2)
    out = capsys.readouterr().out
    assert "(mjx left out: it failed on this model, TypeError: scan body function" in out
    assert "(mjx left out: No module named 'mujoco.mjx'; pip install -e '.[bench]')" in out
