"""Extraction throughput on CUDA: `neuroneval.torch.extract` with its overlap against without it.

With the overlap (``overlap=True``, the default) each batch's rows are copied to pinned host
memory without blocking and written to the shards by one background thread, so disk writes
overlap the next forward passes. The peer is the same loop without it (``overlap=False``): a
synchronous copy to the host and the shard writes in the calling thread. Both runs extract the
same layers of the same model over the same images into fresh directories; the script prints
images per second of each and the ratio (overlap over synchronous: above 1, the overlap pays).

The model is ResNet-50 (torchvision's, random weights) or, without torchvision, a ResNet-50-like
stack of bottleneck blocks built here (same widths and depths, random weights).

    python benches/gpu_extract.py                  # 2,048 random 224x224 images, batches of 256, on CUDA
    python benches/gpu_extract.py --images 4096 --reduce mean
    python benches/gpu_extract.py --cpu-smoke      # a tiny version on the CPU: checks that the script works

Without CUDA (and without --cpu-smoke) it says that it needs a GPU and exits 0. Not collected
by pytest (which collects bench_*.py); it imports torch only when run.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def bottleneck_resnet(width: int = 64, blocks: tuple[int, ...] = (3, 4, 6, 3), classes: int = 1000) -> Any:
    """A ResNet-50-like network (torchvision's module names: conv1, layer1..layer4, avgpool, fc)."""
    from collections import OrderedDict

    from torch import nn

    class Bottleneck(nn.Module):
        def __init__(self, cin: int, mid: int, stride: int) -> None:
            super().__init__()
            cout = mid * 4
            self.conv1, self.bn1 = nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid)
            self.conv2, self.bn2 = nn.Conv2d(mid, mid, 3, stride, 1, bias=False), nn.BatchNorm2d(mid)
            self.conv3, self.bn3 = nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = (
                nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                if stride != 1 or cin != cout
                else nn.Identity()
            )

        def forward(self, x: Any) -> Any:
            h = self.relu(self.bn1(self.conv1(x)))
            h = self.relu(self.bn2(self.conv2(h)))
            h = self.bn3(self.conv3(h))
            return self.relu(h + self.downsample(x))

    layers: OrderedDict[str, nn.Module] = OrderedDict(
        conv1=nn.Conv2d(3, width, 7, 2, 3, bias=False),
        bn1=nn.BatchNorm2d(width),
        relu=nn.ReLU(inplace=True),
        maxpool=nn.MaxPool2d(3, 2, 1),
    )
    cin = width
    for i, count in enumerate(blocks):
        mid = width * 2**i
        stage = [Bottleneck(cin if j == 0 else mid * 4, mid, 2 if (j == 0 and i > 0) else 1) for j in range(count)]
        layers[f"layer{i + 1}"] = nn.Sequential(*stage)
        cin = mid * 4
    layers["avgpool"] = nn.AdaptiveAvgPool2d(1)
    layers["flatten"] = nn.Flatten()
    layers["fc"] = nn.Linear(cin, classes)
    return nn.Sequential(layers)


def build_model(tiny: bool) -> tuple[Any, str]:
    import torch

    torch.manual_seed(0)
    if tiny:
        return bottleneck_resnet(
            width=8, blocks=(1, 1, 1, 1), classes=10
        ), "tiny ResNet-like (width 8, 1 block per stage)"
    try:
        from torchvision.models import resnet50

        return resnet50(weights=None), "torchvision ResNet-50 (random weights)"
    except ImportError:
        return bottleneck_resnet(), "ResNet-50-like bottleneck stack built here (random weights; no torchvision)"


def timed_extract(
    model: Any, x: Any, args: argparse.Namespace, root: Path, overlap: bool, device: str, quiet: bool = False
) -> float:
    """Seconds for one whole extraction (into a fresh directory, deleted afterwards)."""
    import torch
    from neuroneval.torch import extract

    out = root / ("overlap" if overlap else "sync")
    shutil.rmtree(out, ignore_errors=True)
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    extract(model, x, args.layers.split(","), out, device=device, reduce=args.reduce, batch_size=args.batch_size,
            autocast=args.autocast, progress=False, overlap=overlap)  # fmt: skip
    seconds = time.perf_counter() - start
    written = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    if not quiet:
        print(f"  {'overlap    ' if overlap else 'synchronous'}: {x.shape[0] / seconds:9.1f} images/s "
              f"({seconds:.2f} s, {written / 2**20:.1f} MiB written)")  # fmt: skip
    shutil.rmtree(out, ignore_errors=True)
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--images", type=int, default=2048, help="random input images (default 2048)")
    parser.add_argument("--size", type=int, default=224, help="image side in pixels (default 224)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--layers", default="layer3,layer4,avgpool", help="comma-separated module names")
    parser.add_argument("--reduce", default="spatial", help="reduction of the feature maps (default spatial)")
    parser.add_argument("--no-autocast", dest="autocast", action="store_false", help="run the model in float32")
    parser.add_argument("--repeats", type=int, default=2, help="timed runs of each mode, alternating (best kept)")
    parser.add_argument("--dir", type=Path, default=None, help="where to write the stores (default a temporary dir)")
    parser.add_argument("--cpu-smoke", action="store_true", help="a tiny version on the CPU, to check the script")
    args = parser.parse_args(argv)

    import torch

    if args.cpu_smoke:
        device = "cpu"
        args.images, args.size, args.batch_size, args.repeats = 64, 64, 16, 1
    elif torch.cuda.is_available():
        device = "cuda"
        torch.backends.cudnn.benchmark = True
    else:
        print("gpu_extract.py measures extraction on CUDA and needs a GPU; none is available here "
              "(run with --cpu-smoke for a tiny check on the CPU)")  # fmt: skip
        return 0

    model, description = build_model(args.cpu_smoke)
    model = model.to(device).eval()
    if device == "cuda":
        model = model.to(memory_format=torch.channels_last)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(args.images, 3, args.size, args.size, generator=generator)
    if device == "cuda":
        x = x.pin_memory()  # so that the input copies do not block either
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    print(f"extract throughput on {name}: {description}; {args.images} images {args.size}x{args.size}, "
          f"batches of {args.batch_size}, layers {args.layers} ({args.reduce}), float16 store"
          f"{', autocast' if args.autocast and device == 'cuda' else ''}")  # fmt: skip

    root = Path(tempfile.mkdtemp(prefix="neuroneval-gpu-extract-", dir=args.dir))
    try:
        # Warm-up: cuDNN's algorithm search, the allocators, the page cache of the output disk.
        timed_extract(model, x[: 2 * args.batch_size], args, root, True, device, quiet=True)
        best = {True: float("inf"), False: float("inf")}
        for _ in range(args.repeats):
            for overlap in (False, True):
                best[overlap] = min(best[overlap], timed_extract(model, x, args, root, overlap, device))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    with_overlap, without = args.images / best[True], args.images / best[False]
    print(f"overlap {with_overlap:.1f} images/s, synchronous {without:.1f} images/s, "
          f"ratio {with_overlap / without:.2f} (overlap over synchronous; best of {args.repeats})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
