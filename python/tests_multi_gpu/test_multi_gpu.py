"""conv2d on two or more GPUs of one host (pytest, from the installed wheel; issue 24): plans
cached per device, every device used concurrently from threads with their own streams, tensors
on different devices refused with out= untouched, the C ABI's device errors through ctypes.
Fails (does not skip) with fewer than two GPUs: tools/gpu_run.sh runs it only in its multi_gpu
step.
"""
import threading

import pytest
import torch
import torch.nn.functional as F

import conv2d
from conv2d import _native, functional


def _devices():
    n = torch.cuda.device_count()
    assert n >= 2, f"FAILED: this test needs two GPUs; this host has {n}"
    return [torch.device("cuda", i) for i in range(n)]


def _ok(y, ref):
    return bool(((y.double() - ref.to(y.device)).abs()
                 <= 1e-3 + 1e-3 * ref.to(y.device).abs()).all())


CASES = [((2, 64, 64, 128, 128), (64, 64, 16, 16), {}),                 # the FFT
         ((2, 32, 28, 28), (48, 32, 3, 3), dict(padding=1)),            # implicit GEMM
         ((2, 16, 30, 30), (16, 1, 5, 5), dict(padding=2, groups=16))]  # depthwise


def test_every_device_concurrently():
    devices = _devices()
    errors = []

    def worker(device, t):
        try:
            torch.cuda.set_device(device)
            s = torch.cuda.Stream(device)
            with torch.cuda.stream(s):
                for i in range(4):
                    xs, ws, kw = CASES[(t + i) % len(CASES)]
                    g = torch.Generator(device=device).manual_seed(100 * device.index + i)
                    x = torch.randn(xs, device=device, generator=g)
                    w = torch.randn(ws, device=device, generator=g)
                    b = torch.randn(ws[0], device=device, generator=g)
                    y = conv2d.conv2d(x, w, b, **kw)
                    s.synchronize()
                    ref = F.conv2d(x.double(), w.double(), b.double(), **kw)
                    if not _ok(y, ref) or y.device != device:
                        errors.append((device, t, i, "wrong result"))
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append((device, t, repr(e)))

    threads = [threading.Thread(target=worker, args=(d, t)) for d in devices for t in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    made = {c.index for c in functional._calls.values() if c.run is not None}
    assert made >= {d.index for d in devices}, made


def test_tensors_on_different_devices_are_refused():
    d0, d1 = _devices()[:2]
    x = torch.randn(1, 4, 10, 10, device=d0)
    w = torch.randn(6, 4, 3, 3, device=d1)
    out = torch.full((1, 6, 8, 8), 7.0, device=d0)
    with pytest.raises(ValueError, match="is on"):
        conv2d.conv2d(x, w, out=out)
    assert bool((out == 7.0).all())
    out1 = torch.full((1, 6, 8, 8), 7.0, device=d1)  # out on another device than x and w
    with pytest.raises(ValueError, match="out must be"):
        conv2d.conv2d(x, w.to(d0), out=out1)
    assert bool((out1 == 7.0).all())


def test_a_call_with_another_device_current_runs_on_its_tensors_device():
    d0, d1 = _devices()[:2]
    x = torch.randn(2, 8, 20, 20, device=d1)
    w = torch.randn(8, 8, 3, 3, device=d1)
    with torch.cuda.device(d0):  # the current device is not the tensors'
        y = conv2d.conv2d(x, w, padding=1)
    assert y.device == d1 and _ok(y, F.conv2d(x.double(), w.double(), padding=1))


def test_the_c_abi_refuses_a_plan_on_another_device():
    import ctypes
    d0, d1 = _devices()[:2]
    x = torch.randn(1, 8, 16, 16, device=d1)
    w = torch.randn(8, 8, 3, 3, device=d1)
    y = torch.full((1, 8, 14, 14), 7.0, device=d1)
    with torch.cuda.device(d0):
        plan = _native.Plan((1, 8, 8, 16, 16, 3, 3, 0, 0, 0, 0, 1, 1, 1, 1, 1), False, "auto")
    ws = torch.empty(max(plan.workspace_bytes, 1), dtype=torch.uint8, device=d1)
    with torch.cuda.device(d1):  # plan of device 0, device 1 current
        rc = _native.run_function()(plan.handle, x.data_ptr(), w.data_ptr(), None, y.data_ptr(),
                                    ws.data_ptr(), plan.workspace_bytes,
                                    torch.cuda.current_stream(d1).cuda_stream)
    assert rc == _native.CONV2D_FAILED_PRECONDITION, (rc, _native.last_error())
    assert "device" in _native.last_error()
    with torch.cuda.device(d0):  # device 0 current, the tensors on device 1
        rc = _native.run_function()(plan.handle, x.data_ptr(), w.data_ptr(), None, y.data_ptr(),
                                    ws.data_ptr(), plan.workspace_bytes, None)
    assert rc != 0 and "device" in _native.last_error(), _native.last_error()
    torch.cuda.synchronize(d1)
    assert bool((y == 7.0).all())
    del ctypes
