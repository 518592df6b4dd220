"""Quantize one benchmark network for the DPU with vai_q_pytorch; runs inside the Vitis AI
environment (docker image or conda env), never imported by annette_torch itself.

    python zcu102_quantize.py WORK_DIR

``WORK_DIR`` holds what the ``zcu102`` backend wrote: ``model.pt`` (the ``nn.Module``,
pickled), ``annette_model.py`` (the source of its classes that are not part of torch)
and ``quantize.json`` (``input_shape``, ``calib_batches``, ``seed``). The script
calibrates with ``torch_quantizer("calib", ...)`` on random normal inputs, exports the
quantization config, re-creates the quantizer in ``"test"`` mode, runs one input and
exports the xmodel; the result is copied to ``WORK_DIR/quantized/quantized.xmodel``.
Only the standard library, torch and pytorch_nndct are used, so any Vitis AI release
with vai_q_pytorch (Python 3.6 and later) can run it.
"""
import glob
import json
import os
import shutil
import sys


def main(work_dir):
    import torch
    from pytorch_nndct.apis import torch_quantizer

    with open(os.path.join(work_dir, "quantize.json")) as handle:
        settings = json.load(handle)
    sys.path.insert(0, work_dir)          # annette_model.py: the model's own classes
    path = os.path.join(work_dir, "model.pt")
    try:
        model = torch.load(path, map_location="cpu", weights_only=False)
    except TypeError:                      # torch < 1.13 has no weights_only
        model = torch.load(path, map_location="cpu")
    model.eval()
    shape = tuple(settings["input_shape"])
    generator = torch.Generator().manual_seed(int(settings.get("seed", 0)))
    example = torch.randn(shape, generator=generator)
    out_dir = os.path.join(work_dir, "quantized")
    device = torch.device("cpu")

    quantizer = torch_quantizer("calib", model, (example,), output_dir=out_dir, device=device)
    calibrated = quantizer.quant_model
    with torch.no_grad():
        for _ in range(int(settings.get("calib_batches", 8))):
            calibrated(torch.randn(shape, generator=generator))
    quantizer.export_quant_config()

    quantizer = torch_quantizer("test", model, (example,), output_dir=out_dir, device=device)
    with torch.no_grad():
        quantizer.quant_model(example)
    quantizer.export_xmodel(output_dir=out_dir, deploy_check=False)

    found = sorted(glob.glob(os.path.join(out_dir, "*_int.xmodel")))
    if not found:
        sys.exit("vai_q_pytorch wrote no *_int.xmodel into %s" % out_dir)
    shutil.copyfile(found[0], os.path.join(out_dir, "quantized.xmodel"))
    print("quantized xmodel: %s" % found[0])


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python zcu102_quantize.py WORK_DIR")
    main(sys.argv[1])
