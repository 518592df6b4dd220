"""Profile an ONNX model on an Intel NCS2 (MYRIAD) with OpenVINO 2022.3; runs in the
interpreter that has OpenVINO 2022.3 (the last release with the MYRIAD plugin), never
imported by annette_torch.

    python ncs2_runner.py --info
    python ncs2_runner.py MODEL.onnx --warmup 5 --repeats 25 --out result.json [--device MYRIAD]

``--info`` prints ``{"openvino": get_version(), "devices": Core().available_devices,
"device_name": FULL_DEVICE_NAME}`` as JSON. Otherwise the model is compiled with
``{"PERF_COUNT": "YES"}``; after ``warmup`` untimed inferences of one random normal
input (seed 0), each of ``repeats`` inferences records every node's
``get_profiling_info()`` entry (``node_name``, ``node_type``, ``exec_type``, ``status``,
``real_time``); the runtime model's ``originalLayersNames`` (when the plugin reports a
runtime model) say which ONNX nodes each runtime node computes. A second compiled model
without performance counters gives ``repeats`` end-to-end times (``time.perf_counter``
around ``infer``).

``result.json``: ``{"format": "annette-ncs2-runner", "version": 1, "openvino", "device",
"warmup", "repeats", "layers": [{"name", "type", "exec_type", "status", "real_time_ms":
[...], "original_names": [...]}], "end_to_end_ms": [...]}``. Exit codes: 0 done, 2
usage, 3 the model does not compile for the device (trying again will not help), 4
the device failed while running or is missing (may pass: the stick was busy or lost).
"""
import argparse
import json
import sys
import time


def _info(core, device):
    from openvino.runtime import get_version
    devices = list(core.available_devices)
    name = ""
    if device in devices:
        try:
            name = str(core.get_property(device, "FULL_DEVICE_NAME"))
        except Exception:                  # older plugins lack the property
            name = device
    return {"openvino": get_version(), "devices": devices, "device_name": name}


def _original_names(compiled):
    try:
        ops = compiled.get_runtime_model().get_ordered_ops()
    except Exception:                      # a plugin without a runtime model
        return {}
    names = {}
    for op in ops:
        info = op.get_rt_info()
        if "originalLayersNames" not in info:
            continue
        value = info["originalLayersNames"]
        for convert in (lambda v: v.astype(str), lambda v: v.value, str):
            try:
                text = str(convert(value))
                break
            except Exception:
                continue
        names[op.get_friendly_name()] = [n for n in text.split(",") if n]
    return names


def _status(entry):
    status = entry.status
    return getattr(status, "name", str(status).rsplit(".", 1)[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?")
    parser.add_argument("--device", default="MYRIAD")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=25)
    parser.add_argument("--out")
    parser.add_argument("--info", action="store_true")
    args = parser.parse_args(argv)

    import numpy
    from openvino.runtime import Core

    core = Core()
    info = _info(core, args.device)
    if args.info:
        print(json.dumps(info))
        return 0
    if not args.model or not args.out:
        parser.print_usage(sys.stderr)
        return 2
    if args.device not in info["devices"]:
        print("device %s not found; OpenVINO sees %s" % (args.device, info["devices"] or "no device"),
              file=sys.stderr)
        return 4
    model = core.read_model(args.model)
    shape = [int(d) for d in model.inputs[0].get_shape()]
    x = numpy.random.default_rng(0).standard_normal(shape).astype(numpy.float32)
    try:
        profiled = core.compile_model(model, args.device, {"PERF_COUNT": "YES"})
    except Exception as error:
        print("compile failed: %s" % error, file=sys.stderr)
        return 3
    report = {"format": "annette-ncs2-runner", "version": 1, "openvino": info["openvino"], "device": args.device,
              "warmup": args.warmup, "repeats": args.repeats, "layers": [], "end_to_end_ms": []}
    originals = _original_names(profiled)
    try:
        request = profiled.create_infer_request()
        for _ in range(args.warmup):
            request.infer({0: x})
        layers = {}
        for _ in range(args.repeats):
            request.infer({0: x})
            for entry in request.get_profiling_info():
                layer = layers.get(entry.node_name)
                if layer is None:
                    layer = layers[entry.node_name] = {
                        "name": entry.node_name, "type": entry.node_type, "exec_type": entry.exec_type,
                        "status": _status(entry), "real_time_ms": [],
                        "original_names": originals.get(entry.node_name, [])}
                layer["real_time_ms"].append(entry.real_time.total_seconds() * 1e3)
        report["layers"] = list(layers.values())
        del request, profiled
        plain = core.compile_model(model, args.device)
        request = plain.create_infer_request()
        for _ in range(args.warmup):
            request.infer({0: x})
        for _ in range(args.repeats):
            start = time.perf_counter()
            request.infer({0: x})
            report["end_to_end_ms"].append((time.perf_counter() - start) * 1e3)
    except Exception as error:
        print("inference on %s failed: %s" % (args.device, error), file=sys.stderr)
        return 4
    with open(args.out, "w") as handle:
        json.dump(report, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
