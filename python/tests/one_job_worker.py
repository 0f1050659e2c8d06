"""One rank of test_one_job's Python half: examples/cnn.py's model (weft train's
`cnn`) with weft.DataParallel, the options given as KEY=VALUE, trained STEPS
iterations on random data of Fashion-MNIST's shape; saves its state_dict.

    one_job_worker.py OUT STEPS strategy=flsgd H=2 compression=powersgd:1 allow=ssgd+lossy ...
"""

import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))
import weft  # noqa: E402
from cnn import Cnn  # noqa: E402

torch.set_num_threads(1)


def value(text):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def main():
    out, steps = sys.argv[1], int(sys.argv[2])
    options = {k: value(v) for k, v in (a.split("=", 1) for a in sys.argv[3:])}
    if "allow" in options:
        options["allow"] = tuple(options["allow"].split("+"))
    torch.manual_seed(0)
    net = Cnn()
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    options.setdefault("verbose", False)
    model = weft.DataParallel(net, opt, layers=net.layers(), failure_timeout=30, **options)
    for _ in range(steps):
        opt.zero_grad()
        F.cross_entropy(model(torch.randn(8, 1, 28, 28)), torch.randint(0, 10, (8,))).backward()
        opt.step()
    torch.save(model.state_dict(), os.path.join(out, f"state.rank{os.environ['RANK']}.pt"))
    model.finish()


if __name__ == "__main__":
    main()
