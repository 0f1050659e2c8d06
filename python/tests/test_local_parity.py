"""Local SGD parity (docs/python.md, "Update modes"): a user's loop with each habit of
real training scripts, on two processes, under PyTorch's PostLocalSGD (DDP's local
steps, the parameters averaged after every H-th step) and under weft's flsgd with
the same H in each update mode. Each run ends within 1e-5 of PostLocalSGD's
parameters after 30 steps, or raises an error naming the habit (Note [Local SGD
under the user's step] in src/runtime/comm/engine.h)."""

from test_parity import check_against

RUNS = ["flsgd/auto", "flsgd/ddp", "flsgd/overlap"]


def test_every_habit_matches_post_local_sgd_or_is_refused_by_name(tmp_path):
    check_against(tmp_path, "postlocalsgd", RUNS)
