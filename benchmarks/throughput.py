"""Batch throughput of closed-chain simulation, ukjax against MuJoCo's `rollout` and MJX: the
comparison of `ukjax bench` (ukjax/cli/bench.py, where the cases are described) at full size.

    python benchmarks/throughput.py [--batch 2048] [--steps 1000] [--mjx-batch 256]
"""

from ukjax.cli.bench import main

if __name__ == "__main__":
    main()
