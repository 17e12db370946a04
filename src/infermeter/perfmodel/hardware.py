"""Hardware catalog: accelerator and CPU specifications with their sources.

Promises: :func:`get_hardware` returns a frozen :class:`Hardware` for a catalog id from the
shipped ``data/hardware.yaml``, merged with an optional user YAML file of the same layout
(fields of an existing id are overridden, new ids must carry every required field). Unknown ids,
missing fields and bad values raise :class:`ConfigError` naming the file, id and field. :func:`get_network` returns
a frozen :class:`Network` of ``data/networks.yaml`` (what a group larger than one node's ``node_devices`` crosses)::

    >>> hw = get_hardware("h100-sxm")
    >>> hw.memory_bandwidth_gbs, hw.peak_tflops("fp8"), hw.family
    (3350.0, 1978.9, 'hopper')

CPU entries (``type: cpu``) derive TFLOPS from cores x clock x vector lanes x 2 (FMA) x FMA units:
FP32 at that rate, FP16 the same (converted), BF16 twice (dot-product instructions), INT8 four
times (VNNI), unless ``tflops`` lists explicit figures (e.g. AMX). ``memory_type`` (hbm3, gddr6x,
ddr5, ...) gives :attr:`Hardware.memory_class`, by which calibration entries may be keyed.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infermeter.errors import ConfigError
from infermeter.yamlfile import safe_load, yaml_problem

_GPU_REQUIRED = ("name", "family", "memory_gb", "memory_bandwidth_gbs", "tflops", "interconnect", "tdp_w", "source", "date")
_CPU_REQUIRED = ("name", "family", "memory_gb", "memory_bandwidth_gbs", "cores", "clock_ghz", "vector_width_bits", "tdp_w", "source", "date")
_DTYPES = ("bf16", "fp16", "fp8", "int8", "fp4")
DATA_DIR = Path(__file__).resolve().parent.parent / "data"


@dataclass(frozen=True, slots=True)
class Interconnect:
    kind: str
    bandwidth_gbs: float  # bidirectional aggregate per device
    latency_us: float  # start-up latency of one small all-reduce
    p2p_domain: int = 0  # devices that reach each other peer-to-peer (0: all); a larger group crosses the CPU sockets
    cross_domain_factor: float = 1.0  # fraction of the all-reduce bandwidth a ring keeps beyond p2p_domain devices
    custom_allreduce_max: int = 0  # most devices the engines' own all-reduce kernel serves (0: any); beyond them NCCL's
    nccl_latency_us: float = 0.0  # start-up latency of NCCL's small all-reduce on this link (used beyond custom_allreduce_max)
    node_devices: int = 8  # devices one node (server) holds on this link; a larger group crosses the network between nodes

    def allreduce_latency_us(self, devices: int) -> float:
        """Start-up latency (µs) of one small all-reduce over ``devices`` devices: ``latency_us`` (``nccl_latency_us``
        beyond ``custom_allreduce_max`` devices: vLLM and SGLang run their one-shot P2P kernel on NVLink meshes and on
        at most two PCIe GPUs, and hand larger PCIe groups to NCCL), times ``1 + 0.3 (log2 devices - 1)``."""
        base = self.nccl_latency_us if 0 < self.custom_allreduce_max < devices else self.latency_us
        return base * (1.0 + 0.3 * (math.log2(devices) - 1.0))

    def allreduce_factor(self, devices: int) -> float:
        """The fraction of the link's all-reduce bandwidth a ring over ``devices`` devices keeps (1 within the P2P domain)."""
        return self.cross_domain_factor if 0 < self.p2p_domain < devices else 1.0

    @property
    def per_direction_bytes_per_s(self) -> float:
        return self.bandwidth_gbs * 1e9 / 2

    def nodes(self, devices: int) -> int:
        """The servers ``devices`` devices fill (``node_devices`` each)."""
        return max(1, math.ceil(devices / self.node_devices))

    def internode_allreduce_latency_us(self, devices: int, net: Network) -> float:
        """Start-up latency (µs) of one small all-reduce over ``devices`` devices on more than one node: NCCL's over
        the whole group (the engines' own all-reduce kernels serve one node only: vLLM's CustomAllreduce and SGLang's
        are disabled for a group that spans nodes), i.e. the link's NCCL start-up over one node's devices plus
        ``ALLREDUCE_HOPS`` one-way network latencies, times ``1 + 0.3 (log2 nodes - 1)`` as within a node."""
        base = self.nccl_latency_us or self.latency_us
        local = min(devices, self.node_devices)
        within = base * (1.0 + 0.3 * (math.log2(local) - 1.0)) if local > 1 else 0.0  # one device a node: no NVLink hop
        return within + ALLREDUCE_HOPS * net.latency_us * (1.0 + 0.3 * (math.log2(self.nodes(devices)) - 1.0))


# One-way network latencies a small all-reduce between two nodes pays: NCCL's reduce and broadcast each cross the
# boundary and wait for the peer's credit (two round trips). On InfiniBand (5 µs one way) this gives the 19-20 µs
# that nccl-tests' all_reduce_perf reports for 8-128 B over two ranks, one GPU on each of two A100 HDR nodes
# (NVIDIA/nccl-tests#150); the start-up within a node is added on top, unchecked (2 x 8 H20 GPUs took about 46 µs,
# NVIDIA/nccl#1244, where this gives 30-33).
ALLREDUCE_HOPS = 4


@dataclass(frozen=True, slots=True)
class Network:
    """A network between nodes (``data/networks.yaml``): what a tensor- or pipeline-parallel group that spans
    nodes, and a disaggregated KV transfer between nodes, runs over."""

    id: str
    name: str
    bandwidth_gbs: float  # one direction, per GPU (one NIC per GPU), or per node when shared_nic
    latency_us: float  # one-way start-up latency of one transfer
    shared_nic: bool
    source: str

    def per_device_bytes_per_s(self, node_devices: int) -> float:
        """One direction, per device of a full node (a shared NIC is split over the node's devices)."""
        return self.bandwidth_gbs * 1e9 / (node_devices if self.shared_nic else 1)


DEFAULT_NETWORK = "ib-ndr400"  # the DGX/HGX reference: one ConnectX-7 400 Gb/s NIC per GPU


@functools.lru_cache(maxsize=1)
def network_catalog() -> dict[str, Network]:
    """The shipped network catalog (``data/networks.yaml``); ConfigError naming the entry and field when malformed."""
    text = (DATA_DIR / "networks.yaml").read_text(encoding="utf-8")
    out: dict[str, Network] = {}
    for nid, e in _load_yaml(text, "networks.yaml").items():
        where = f"networks.yaml: network {nid!r}"
        if not isinstance(e, dict):
            raise ConfigError(f"{where}: expected a mapping of fields")
        out[str(nid)] = Network(id=str(nid), name=str(e.get("name", nid)), bandwidth_gbs=_num(where, "bandwidth_gbs", e.get("bandwidth_gbs")),
                                latency_us=_num(where, "latency_us", e.get("latency_us")), shared_nic=bool(e.get("shared_nic", False)),
                                source=str(e.get("source", "")))
    return out


def get_network(network_id: str) -> Network:
    """One network by id; ConfigError listing the known ids when unknown."""
    nets = network_catalog()
    net = nets.get(network_id)
    if net is None:
        raise ConfigError(f"unknown network {network_id!r}; known: {', '.join(nets)}")
    return net


@dataclass(frozen=True, slots=True)
class Hardware:
    """One device (GPU or CPU socket) as the performance model sees it."""

    id: str
    name: str
    type: str  # "gpu" | "cpu"
    family: str
    memory_gb: float
    memory_bandwidth_gbs: float
    tflops: tuple[tuple[str, float], ...]
    interconnect: Interconnect
    tdp_w: float
    source: str
    date: str
    verified: str = ""
    cores: int = 0
    memory_gib: float = 0.0  # total the driver reports, when known; else memory_gb is used
    memory_type: str = ""  # hbm2, hbm2e, hbm3, hbm3e, gddr6, gddr6x, ddr5, ...
    fp16_acc16_tflops: float = 0.0  # FP16 GEMMs with FP16 accumulation, where faster than FP32 accumulation (GeForce)

    @property
    def memory_class(self) -> str:
        """``hbm``, ``gddr`` or ``dram`` (calibration entries may be keyed by it); "" when unknown."""
        t = self.memory_type.lower()
        return "hbm" if t.startswith("hbm") else "gddr" if t.startswith("gddr") else "dram" if t.startswith(("ddr", "lpddr")) else ""

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib * 2**30 if self.memory_gib else self.memory_gb * 1e9

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return self.memory_bandwidth_gbs * 1e9

    def has(self, dtype: str) -> bool:
        return any(k == dtype for k, _ in self.tflops)

    def peak_tflops(self, dtype: str) -> float:
        """Dense TFLOPS at ``dtype``; ConfigError when the hardware has no such compute.

        ``fp16_acc16`` is the FP16 rate with FP16 accumulation (``fp16_acc16_tflops`` where given, else the FP16 rate).
        """
        if dtype == "fp16_acc16":
            return self.fp16_acc16_tflops or self.peak_tflops("fp16" if self.has("fp16") else "bf16")
        for k, v in self.tflops:
            if k == dtype:
                return v
        raise ConfigError(f"hardware {self.id!r} has no {dtype} compute (it lists {', '.join(k for k, _ in self.tflops)})")


def _cpu_tflops(entry: dict[str, Any]) -> dict[str, float]:
    fp32 = float(entry["cores"]) * float(entry["clock_ghz"]) * (float(entry["vector_width_bits"]) / 32) * 2 * float(entry.get("fma_units", 1)) / 1000
    derived = {"fp16": fp32, "bf16": 2 * fp32, "int8": 4 * fp32}
    derived.update({k: float(v) for k, v in (entry.get("tflops") or {}).items()})
    return derived


def _num(where: str, field: str, value: Any, *, allow_zero: bool = False) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: field {field!r} must be a number, got {value!r}") from None
    if x < 0 or (x == 0 and not allow_zero):
        raise ConfigError(f"{where}: field {field!r} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return x


def _build(hid: str, entry: dict[str, Any], origin: str) -> Hardware:
    where = f"{origin}: hardware {hid!r}"
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: expected a mapping of fields")
    kind = str(entry.get("type", "gpu"))
    if kind not in ("gpu", "cpu"):
        raise ConfigError(f"{where}: field 'type' must be 'gpu' or 'cpu', got {kind!r}")
    missing = [f for f in (_CPU_REQUIRED if kind == "cpu" else _GPU_REQUIRED) if f not in entry]
    if missing:
        raise ConfigError(f"{where}: missing field(s) {', '.join(missing)}")
    if kind == "cpu":
        for f in ("cores", "clock_ghz", "vector_width_bits"):
            _num(where, f, entry[f])
        raw_tflops: dict[str, Any] = _cpu_tflops(entry)
    else:
        raw_tflops = entry["tflops"]
        if not isinstance(raw_tflops, dict) or not raw_tflops:
            raise ConfigError(f"{where}: field 'tflops' must map dtypes ({', '.join(_DTYPES)}) to dense TFLOPS")
    tflops = []
    for k, v in raw_tflops.items():
        if k not in _DTYPES:
            raise ConfigError(f"{where}: tflops dtype {k!r} unknown (use {', '.join(_DTYPES)})")
        tflops.append((k, _num(where, f"tflops.{k}", v)))
    ic = entry.get("interconnect") or {"kind": "none", "bandwidth_gbs": 0, "latency_us": 0}
    if not isinstance(ic, dict):
        raise ConfigError(f"{where}: field 'interconnect' must be a mapping with kind, bandwidth_gbs, latency_us")
    interconnect = Interconnect(
        kind=str(ic.get("kind", "none")),
        bandwidth_gbs=_num(where, "interconnect.bandwidth_gbs", ic.get("bandwidth_gbs", 0), allow_zero=True),
        latency_us=_num(where, "interconnect.latency_us", ic.get("latency_us", 0), allow_zero=True),
        p2p_domain=int(_num(where, "interconnect.p2p_domain", ic.get("p2p_domain", 0), allow_zero=True)),
        cross_domain_factor=_num(where, "interconnect.cross_domain_factor", ic.get("cross_domain_factor", 1.0)),
        custom_allreduce_max=_whole(where, "interconnect.custom_allreduce_max", ic.get("custom_allreduce_max", 0)),
        nccl_latency_us=_num(where, "interconnect.nccl_latency_us", ic.get("nccl_latency_us", 0), allow_zero=True),
        node_devices=_whole(where, "interconnect.node_devices", ic.get("node_devices", 8)),
    )
    if bool(interconnect.custom_allreduce_max) != bool(interconnect.nccl_latency_us):
        raise ConfigError(f"{where}: field 'interconnect.custom_allreduce_max' needs 'interconnect.nccl_latency_us' "
                          "and the other way round (the most devices the engines' own all-reduce serves, and the latency "
                          "of the NCCL all-reduce beyond them)")
    if interconnect.node_devices < 1:
        raise ConfigError(f"{where}: field 'interconnect.node_devices' must be at least 1 (the devices one server holds)")
    if interconnect.cross_domain_factor > 1:
        raise ConfigError(f"{where}: field 'interconnect.cross_domain_factor' must be within 0..1, got {interconnect.cross_domain_factor!r}")
    return Hardware(
        id=hid,
        name=str(entry["name"]),
        type=kind,
        family=str(entry["family"]),
        memory_gb=_num(where, "memory_gb", entry["memory_gb"]),
        memory_bandwidth_gbs=_num(where, "memory_bandwidth_gbs", entry["memory_bandwidth_gbs"]),
        tflops=tuple(tflops),
        interconnect=interconnect,
        tdp_w=_num(where, "tdp_w", entry["tdp_w"]),
        source=str(entry["source"]),
        date=str(entry["date"]),
        verified=str(entry.get("verified", "")),
        cores=int(entry.get("cores", 0)),
        memory_gib=_num(where, "memory_gib", entry.get("memory_gib", 0), allow_zero=True),
        memory_type=str(entry.get("memory_type", "")),
        fp16_acc16_tflops=_num(where, "fp16_acc16_tflops", entry.get("fp16_acc16_tflops", 0), allow_zero=True),
    )


def _load_yaml(text: str, origin: str) -> dict[str, Any]:
    import yaml

    try:
        data = safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{origin}: not valid YAML ({yaml_problem(exc)})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: expected a mapping of hardware ids to fields")
    return data


@functools.lru_cache(maxsize=1)
def _builtin_raw() -> dict[str, Any]:
    text = (DATA_DIR / "hardware.yaml").read_text(encoding="utf-8")
    return _load_yaml(text, "hardware.yaml")


@functools.lru_cache(maxsize=16)
def load_catalog(hardware_file: str | None = None) -> dict[str, Hardware]:
    """All hardware entries: the shipped catalog, overridden/extended by ``hardware_file``."""
    raw = {k: dict(v) for k, v in _builtin_raw().items()}
    origin = {k: "hardware.yaml" for k in raw}
    if hardware_file:
        path = Path(hardware_file)
        if not path.is_file():
            raise ConfigError(f"--hardware-file {hardware_file!r}: no such file")
        user = _load_yaml(path.read_text(encoding="utf-8"), str(path))
        for hid, fields in user.items():
            hid = str(hid).lower()
            if not isinstance(fields, dict):
                raise ConfigError(f"{path}: hardware {hid!r}: expected a mapping of fields")
            merged = dict(raw.get(hid, {}))
            base_ic, user_ic = merged.get("interconnect"), fields.get("interconnect")
            # a link of the same kind is merged field by field; another kind replaces the whole link (an NVLink'd L40S
            # keeps none of the PCIe card's socket domain or NCCL start-up)
            if isinstance(base_ic, dict) and isinstance(user_ic, dict) and user_ic.get("kind", base_ic.get("kind")) == base_ic.get("kind"):
                fields = {**fields, "interconnect": {**base_ic, **user_ic}}
            merged.update(fields)
            raw[hid] = merged
            origin[hid] = str(path)
    return {hid: _build(hid, entry, origin[hid]) for hid, entry in raw.items()}


def _whole(where: str, name: str, v: Any) -> int:
    """A whole number >= 0 (ConfigError naming the field otherwise)."""
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ConfigError(f"{where}: field {name!r} must be a whole number >= 0, got {v!r}")
    return v


def get_hardware(hardware_id: str, hardware_file: str | None = None) -> Hardware:
    """One entry by id (case-insensitive); ConfigError listing the known ids when unknown."""
    catalog = load_catalog(hardware_file)
    hw = catalog.get(hardware_id.lower())
    if hw is None:
        raise ConfigError(f"unknown hardware {hardware_id!r}; known: {', '.join(sorted(catalog))} (add one with --hardware-file)")
    return hw
