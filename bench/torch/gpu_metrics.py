"""GPU utilisation as a GPU team reads it, sampled in the background through
the driver's NVML (libnvidia-ml.so.1, loaded with ctypes, so machines without
a driver still run the benchmark and report null with the reason):

- NVML utilisation (% of time a kernel ran) and memory used, every 100 ms;
- Hopper's GPM metrics between consecutive 1 s samples: SM activity, SM
  occupancy, tensor activity and DRAM bandwidth utilisation.

Each reading is (monotonic time, value); window() averages those inside a
time range.
"""

from __future__ import annotations

import ctypes
import threading
import time
from typing import Dict, List, Optional, Tuple

_GPM_METRIC_MAX = 333  # at least as large as any driver's NVML_GPM_METRIC_MAX
GPM_METRICS = {"sm_active_pct": 2, "sm_occupancy_pct": 3, "tensor_active_pct": 5,
               "dram_bw_util_pct": 10}


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


class _GpmSupport(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("isSupportedDevice", ctypes.c_uint)]


class _GpmMetricInfo(ctypes.Structure):
    _fields_ = [("shortName", ctypes.c_char_p), ("longName", ctypes.c_char_p),
                ("unit", ctypes.c_char_p)]


class _GpmMetric(ctypes.Structure):
    _fields_ = [("metricId", ctypes.c_uint), ("nvmlReturn", ctypes.c_int),
                ("value", ctypes.c_double), ("metricInfo", _GpmMetricInfo)]


class _GpmMetricsGet(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("numMetrics", ctypes.c_uint),
                ("sample1", ctypes.c_void_p), ("sample2", ctypes.c_void_p),
                ("metrics", _GpmMetric * _GPM_METRIC_MAX)]


class GpuMetrics:
    def __init__(self, index: int = 0):
        self.series: Dict[str, List[Tuple[float, float]]] = {
            "nvml_util_pct": [], "nvml_mem_util_pct": [], "mem_used_mib": []}
        for k in GPM_METRICS:
            self.series[k] = []
        self.unavailable: Dict[str, str] = {}
        self._stop = threading.Event()
        self._threads: List[threading.Thread] = []
        self._nv = None
        self._dev = ctypes.c_void_p()
        try:
            nv = ctypes.CDLL("libnvidia-ml.so.1")
            if nv.nvmlInit_v2() != 0:
                raise OSError("nvmlInit failed")
            if nv.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(self._dev)) != 0:
                raise OSError(f"no NVML device {index}")
            self._nv = nv
        except (OSError, AttributeError) as e:
            for k in self.series:
                self.unavailable[k] = f"NVML unavailable: {e}"
            return
        sup = _GpmSupport(version=1)
        rc = getattr(nv, "nvmlGpmQueryDeviceSupport", None)
        if rc is None:
            reason = "driver's NVML has no GPM API"
        elif nv.nvmlGpmQueryDeviceSupport(self._dev, ctypes.byref(sup)) != 0:
            reason = "nvmlGpmQueryDeviceSupport failed"
        elif not sup.isSupportedDevice:
            reason = "GPM not supported on this GPU (Hopper or newer needed)"
        else:
            reason = None
        if reason:
            for k in GPM_METRICS:
                self.unavailable[k] = reason
        self._gpm = reason is None

    def start(self) -> "GpuMetrics":
        if self._nv is None:
            return self
        self._threads.append(threading.Thread(target=self._poll_nvml, daemon=True))
        if self._gpm:
            self._threads.append(threading.Thread(target=self._poll_gpm, daemon=True))
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()

    def _poll_nvml(self) -> None:
        nv, dev = self._nv, self._dev
        u, m = _Utilization(), _Memory()
        while not self._stop.wait(0.1):
            now = time.monotonic()
            if nv.nvmlDeviceGetUtilizationRates(dev, ctypes.byref(u)) == 0:
                self.series["nvml_util_pct"].append((now, float(u.gpu)))
                self.series["nvml_mem_util_pct"].append((now, float(u.memory)))
            if nv.nvmlDeviceGetMemoryInfo(dev, ctypes.byref(m)) == 0:
                self.series["mem_used_mib"].append((now, m.used / 2**20))

    def _poll_gpm(self) -> None:
        nv, dev = self._nv, self._dev
        samples = [ctypes.c_void_p(), ctypes.c_void_p()]
        for s in samples:
            if nv.nvmlGpmSampleAlloc(ctypes.byref(s)) != 0:
                for k in GPM_METRICS:
                    self.unavailable[k] = "nvmlGpmSampleAlloc failed"
                return
        cur = 0
        nv.nvmlGpmSampleGet(dev, samples[cur])
        while not self._stop.wait(1.0):
            nxt = 1 - cur
            if nv.nvmlGpmSampleGet(dev, samples[nxt]) != 0:
                continue
            mg = _GpmMetricsGet(version=1, numMetrics=len(GPM_METRICS))
            mg.sample1, mg.sample2 = samples[cur], samples[nxt]
            for i, mid in enumerate(GPM_METRICS.values()):
                mg.metrics[i].metricId = mid
            now = time.monotonic()
            if nv.nvmlGpmMetricsGet(ctypes.byref(mg)) == 0:
                for i, k in enumerate(GPM_METRICS):
                    if mg.metrics[i].nvmlReturn == 0:
                        self.series[k].append((now, mg.metrics[i].value))
            cur = nxt
        for s in samples:
            nv.nvmlGpmSampleFree(s)

    def window(self, t0: float, t1: float) -> Dict[str, Optional[float]]:
        out: Dict[str, Optional[float]] = {}
        for k, pts in self.series.items():
            vals = [v for t, v in list(pts) if t0 <= t <= t1]
            if k == "mem_used_mib":
                out[k] = max(vals) if vals else None
            else:
                out[k] = sum(vals) / len(vals) if vals else None
        return out
