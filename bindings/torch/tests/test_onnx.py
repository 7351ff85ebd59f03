"""ONNX export and ONNX Runtime tests (CPU): the selscan custom-op library (libselscan_ort, through
selscan_torch.onnx.ort_library()) against selscan_torch's ops and the float64 reference, and models
exported with torch.onnx.export(dynamo=True) run in ONNX Runtime against PyTorch eager.

Skipped without onnxruntime, onnx or onnxscript (pip install onnxruntime onnx onnxscript), or when
the package was built without the library (SELSCAN_TORCH_NO_ORT=1).
"""
import ctypes
import math
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxscript")

import selscan_torch as st  # noqa: E402
import selscan_torch.onnx as sonnx  # noqa: E402
from _common import TOL, rel_err  # noqa: E402
from _common import make_inputs as make_scan  # noqa: E402  (CPU scan inputs by argument name)
from onnx import TensorProto, helper  # noqa: E402
from selscan_torch.reference import selective_scan_ref, selective_state_update_ref  # noqa: E402

try:
    LIB = sonnx.ort_library()
except FileNotFoundError as e:  # built with SELSCAN_TORCH_NO_ORT=1
    pytest.skip(str(e), allow_module_level=True)

ONNX_TYPE = {torch.float32: TensorProto.FLOAT, torch.float16: TensorProto.FLOAT16, torch.bfloat16: TensorProto.BFLOAT16}


def session(model, threads=None):
    so = sonnx.session_options()
    if threads is not None:
        so.intra_op_num_threads = threads
    data = model.SerializeToString() if hasattr(model, "SerializeToString") else model
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


# ---- op-level models: a graph of one selscan node, T tensors cast from / to float -----------------
# (the feeds are float32 numpy arrays; f16 / bf16 inputs are made representable in T first, so the
# Cast into T is exact and the op sees exactly what selscan_torch sees)

SCAN_INPUTS = ["u", "delta", "A", "B", "C", "D", "z", "delta_bias", "h0", "cu_seqlens"]
STEP_INPUTS = ["state", "x", "dt", "A", "B", "C", "D", "z", "dt_bias", "state_index"]


def one_node_model(op, input_names, feeds, t_inputs, T, outputs, t_outputs, attrs, ranks=None):
    """A model of one selscan node. feeds: name -> torch tensor (absent: None); t_inputs: the names
    of T inputs (fed as float and cast); outputs: the node's output names ("" skips one); ranks:
    output name -> rank (default: out_rank)."""
    nodes, graph_in, node_in = [], [], []
    for name in input_names:
        t = feeds.get(name)
        if t is None:
            node_in.append("")
            continue
        if t.dtype == torch.int64:
            ty = TensorProto.INT64
        elif t.dtype == torch.int32:
            ty = TensorProto.INT32
        else:
            ty = TensorProto.FLOAT
        graph_in.append(helper.make_tensor_value_info(name, ty, list(t.shape)))
        if name in t_inputs and T != torch.float32:
            nodes.append(helper.make_node("Cast", [name], [name + "_t"], to=ONNX_TYPE[T]))
            node_in.append(name + "_t")
        else:
            node_in.append(name)
    while node_in and node_in[-1] == "":
        node_in.pop()
    node_out = [(o + "_t" if (o in t_outputs and T != torch.float32) else o) if o else "" for o in outputs]
    nodes.append(helper.make_node(op, node_in, node_out, domain="selscan", **attrs))
    graph_out = []
    for o in outputs:
        if not o:
            continue
        if o in t_outputs and T != torch.float32:
            nodes.append(helper.make_node("Cast", [o + "_t"], [o], to=TensorProto.FLOAT))
        rank = ranks[o] if ranks is not None else out_rank(op, o, attrs)
        graph_out.append(helper.make_tensor_value_info(o, TensorProto.FLOAT, [None] * rank))
    graph = helper.make_graph(nodes, op, graph_in, graph_out)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("selscan", 1)])
    model.ir_version = 9
    return model


def out_rank(op, name, attrs):
    if op == "SelectiveScan" and name == "last_state":
        return 1 if attrs.get("return_last_state") == 0 else 3  # (0,) with return_last_state=0
    return 2 if (op, name) == ("SelectiveStateUpdate", "y") else 3


def feed_dict(feeds):
    out = {}
    for k, v in feeds.items():
        if v is None:
            continue
        out[k] = v.numpy() if v.dtype in (torch.int64, torch.int32) else v.float().numpy()
    return out


def run_scan_ort(x, dtype, softplus, last, cu=None, threads=None, last_attr=None):
    feeds = dict(x, cu_seqlens=cu)
    t_in = {"u", "delta", "z"} | ({"B", "C"} if x["B"].dim() > 2 else set())
    attrs = {"delta_softplus": int(softplus)}
    if last_attr is not None:
        attrs["return_last_state"] = last_attr
    model = one_node_model("SelectiveScan", SCAN_INPUTS, feeds, t_in, dtype, ["y", "last_state"] if last else ["y"],
                           {"y"}, attrs)
    onnx.checker.check_model(model)
    return session(model, threads).run(None, feed_dict(feeds))


OPTS = [(D, z, b, s, h) for D in (0, 1) for z in (0, 1) for b in (0, 1) for s in (0, 1) for h in (0, 1)
        if (D, z, b) in ((0, 0, 0), (1, 1, 1), (1, 0, 1), (0, 1, 0)) or (s, h) == (1, 1)]


@pytest.mark.parametrize("bc", ["fixed", "var3", "grouped"])
@pytest.mark.parametrize("opts", OPTS, ids=lambda o: "".join("Dzbsh"[i] if v else "-" for i, v in enumerate(o)))
def test_scan_op_every_option(bc, opts):
    D, z, b, softplus, h0 = opts
    x = make_scan(bc=bc, D=D, z=z, bias=b, h0=h0, seed=sum(opts))
    y, last = run_scan_ort(x, torch.float32, softplus, True)
    args = dict(D=x["D"], z=x["z"], delta_bias=x["delta_bias"], delta_softplus=bool(softplus), return_last_state=True,
                h0=x["h0"])
    y_t, last_t = st.selective_scan_fn(x["u"], x["delta"], x["A"], x["B"], x["C"], **args)
    # the same kernels: bitwise what selscan_torch computes (any thread split gives the same bits)
    assert torch.equal(torch.from_numpy(y), y_t) and torch.equal(torch.from_numpy(last), last_t)
    y_r, last_r = selective_scan_ref(x["u"], x["delta"], x["A"], x["B"], x["C"], **args)
    assert rel_err(y, y_r) < TOL[torch.float32] and rel_err(last, last_r) < TOL[torch.float32]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("bc", ["fixed", "var3", "grouped"])
def test_scan_op_half_dtypes(dtype, bc):
    x = make_scan(bc=bc, dtype=dtype, h0=True, L=70)
    y, last = run_scan_ort(x, dtype, True, True)
    args = dict(D=x["D"], z=x["z"], delta_bias=x["delta_bias"], delta_softplus=True, return_last_state=True, h0=x["h0"])
    y_t, last_t = st.selective_scan_fn(x["u"], x["delta"], x["A"], x["B"], x["C"], **args)
    assert torch.equal(torch.from_numpy(y), y_t.float()) and torch.equal(torch.from_numpy(last), last_t)
    y_r, last_r = selective_scan_ref(x["u"], x["delta"], x["A"], x["B"], x["C"], **args)
    # y: the op rounds its float32 result to dtype once (TOL[dtype]); last_state is float32: no rounding
    assert rel_err(y, y_r) < TOL[dtype] and rel_err(last, last_r) < TOL[torch.float32]


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (3, 37, 130, 16), (2, 64, 65, 80)])
def test_scan_op_shapes_and_threads(threads, shape):
    batch, dim, L, N = shape
    x = make_scan(batch=batch, dim=dim, L=L, N=N, bc="grouped" if dim % 2 == 0 else "var3", h0=True)
    y, last = run_scan_ort(x, torch.float32, True, True, threads=threads)
    args = dict(D=x["D"], z=x["z"], delta_bias=x["delta_bias"], delta_softplus=True, return_last_state=True, h0=x["h0"])
    y_t, last_t = st.selective_scan_fn(x["u"], x["delta"], x["A"], x["B"], x["C"], **args)
    assert torch.equal(torch.from_numpy(y), y_t) and torch.equal(torch.from_numpy(last), last_t)


@pytest.mark.parametrize("h0", [False, True])
def test_scan_op_packed_sequences(h0):
    cu = torch.tensor([0, 10, 10, 37, 50], dtype=torch.int64)  # an empty sequence included
    x = make_scan(batch=1, L=50, h0=h0, n_seqs=4)
    y, last = run_scan_ort(x, torch.float32, True, True, cu=cu)
    args = dict(D=x["D"], z=x["z"], delta_bias=x["delta_bias"], delta_softplus=True, return_last_state=True,
                h0=x["h0"], cu_seqlens=cu)
    y_r, last_r = selective_scan_ref(x["u"], x["delta"], x["A"], x["B"], x["C"], **args)
    assert last.shape == (4, 8, 5)
    assert rel_err(y, y_r) < TOL[torch.float32] and rel_err(last, last_r) < TOL[torch.float32]


def test_scan_op_last_state_attribute():
    x = make_scan()
    y1 = run_scan_ort(x, torch.float32, True, False)[0]  # one output: no last state computed
    y2, last = run_scan_ort(x, torch.float32, True, True, last_attr=0)  # output present, attribute 0
    assert last.shape == (0,) and np.array_equal(y1, y2)
    feeds = dict(x, cu_seqlens=None)  # the second output named "": no buffer, not computed
    model = one_node_model("SelectiveScan", SCAN_INPUTS, feeds, {"u", "delta", "z", "B", "C"}, torch.float32,
                           ["y", ""], {"y"}, {"delta_softplus": 1})
    (y3,) = session(model).run(None, feed_dict(feeds))
    assert np.array_equal(y1, y3)
    with pytest.raises(Exception, match="return_last_state=1 but the node has no second output"):
        run_scan_ort(x, torch.float32, True, False, last_attr=1)


def test_scan_op_empty_and_nan():
    x = make_scan(batch=2, L=0, h0=True)
    y, last = run_scan_ort(x, torch.float32, True, True)
    assert y.shape == (2, 8, 0) and np.array_equal(last, x["h0"].numpy())
    x = make_scan(batch=2, L=20)
    x["u"][1, 3, 5] = float("nan")
    y, _ = run_scan_ort(x, torch.float32, True, True)
    assert np.isnan(y[1, 3, 5:]).all() and not np.isnan(y[0]).any()


def make_step(batch=3, dim=8, N=5, G=1, n_cache=None, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)

    def r(*shape, dt=dtype, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(dt)

    return dict(state=r(n_cache or batch, dim, N, dt=torch.float32), x=r(batch, dim), dt=r(batch, dim, scale=0.5),
                A=-(torch.rand(dim, N, generator=g) + 0.3), B=r(batch, G, N), C=r(batch, G, N), D=r(dim, dt=torch.float32),
                z=r(batch, dim), dt_bias=r(dim, dt=torch.float32, scale=0.3))


def run_step_ort(s, dtype, softplus=True, idx=None, threads=None):
    feeds = dict(s, state_index=idx)
    model = one_node_model("SelectiveStateUpdate", STEP_INPUTS, feeds, {"x", "dt", "B", "C", "z"}, dtype,
                           ["y", "state_out"], {"y"}, {"dt_softplus": int(softplus)})
    onnx.checker.check_model(model)
    return session(model, threads).run(None, feed_dict(feeds))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("G", [1, 2])
@pytest.mark.parametrize("indexed", [False, True])
def test_step_op(dtype, G, indexed):
    s = make_step(batch=3, dim=300, N=16, G=G, n_cache=5 if indexed else None, dtype=dtype)
    idx = torch.tensor([4, -1, 0], dtype=torch.int32) if indexed else None
    y, state_out = run_step_ort(s, dtype, idx=idx)
    ref_state = s["state"].clone()
    y_t = st.selective_state_update(ref_state, s["x"], s["dt"], s["A"], s["B"], s["C"], s["D"], s["z"],
                                    dt_bias=s["dt_bias"], dt_softplus=True, state_batch_indices=idx)
    assert torch.equal(torch.from_numpy(y), y_t.float()) and torch.equal(torch.from_numpy(state_out), ref_state)
    y_r, st_r = selective_state_update_ref(s["state"], s["x"], s["dt"], s["A"], s["B"], s["C"], s["D"], s["z"],
                                           dt_bias=s["dt_bias"], dt_softplus=True, state_batch_indices=idx)
    # y: one rounding to dtype (TOL[dtype]); the state is float32: no rounding
    assert rel_err(y, y_r) < TOL[dtype] and rel_err(state_out, st_r) < TOL[torch.float32]
    if indexed:  # rows no batch row points at are copied through unchanged
        assert np.array_equal(state_out[[1, 2, 3]], s["state"][[1, 2, 3]].numpy())


# ---- causal conv1d ops (built in when selscan.h has the causal conv1d) ---------------------------

HAS_CONV = bool(ctypes.CDLL(LIB).selscan_ort_has_conv())
conv_only = pytest.mark.skipif(not HAS_CONV, reason="the library was built from a selscan.h without the causal conv1d")
CONV_INPUTS = ["x", "weight", "bias", "init_state", "cu_seqlens"]
CONV_UPDATE_INPUTS = ["state", "x", "weight", "bias", "state_index"]


def conv_ref(x, weight, bias=None, init=None, silu=False):
    """float64 causal depthwise conv1d from the definition (xpad = [init_state | x])."""
    batch, dim, L = x.shape
    W = weight.shape[1]
    pad = init.double() if init is not None else torch.zeros(batch, dim, W - 1, dtype=torch.float64)
    xp = torch.cat([pad, x.double()], dim=-1)
    if L == 0:  # an empty sequence: its final state is its initial state
        return x.double(), pad
    y = F.conv1d(xp, weight.double()[:, None, :], bias.double() if bias is not None else None, groups=dim)
    return (F.silu(y) if silu else y), xp[..., xp.shape[-1] - (W - 1):]


def conv_model(op, names, feeds, dtype, outputs, attrs):
    ranks = {"y": feeds["x"].dim(), "final_state": 3 if attrs.get("return_final_state", 1) else 1, "state_out": 3}
    model = one_node_model(op, names, feeds, {"x", "init_state", "state"}, dtype, outputs,
                           {"y", "final_state", "state_out"}, attrs, ranks=ranks)
    onnx.checker.check_model(model)
    return model


def make_conv(batch=2, dim=24, L=37, W=4, dtype=torch.float32, bias=True, init=False, rows=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    return dict(x=torch.randn(batch, dim, L, generator=g).to(dtype), weight=torch.randn(dim, W, generator=g) * 0.5,
                bias=torch.randn(dim, generator=g) if bias else None,
                init_state=torch.randn(rows or batch, dim, W - 1, generator=g).to(dtype) if init else None)


@conv_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("W", [2, 3, 4])
@pytest.mark.parametrize("opts", [(0, 0, 0), (1, 1, 1), (1, 0, 1), (0, 1, 0)], ids=["plain", "bias-init-silu",
                                                                                    "bias-silu", "init"])
def test_conv_op(dtype, W, opts):
    bias, init, silu = opts
    c = make_conv(W=W, dtype=dtype, bias=bias, init=init, seed=W)
    model = conv_model("CausalConv1d", CONV_INPUTS, c, dtype, ["y", "final_state"], {"silu": silu})
    y, fin = session(model).run(None, feed_dict(c))
    y_r, fin_r = conv_ref(c["x"], c["weight"], c["bias"], c["init_state"], bool(silu))
    assert rel_err(y, y_r) < TOL[dtype] and np.array_equal(fin, fin_r.to(dtype).float().numpy())  # y: one rounding


@conv_only
def test_conv_op_packed_and_update():
    # packed sequences: each sequence as its own call
    cu = torch.tensor([0, 5, 5, 30, 40], dtype=torch.int64)
    c = make_conv(batch=1, L=40, init=True, rows=4)
    model = conv_model("CausalConv1d", CONV_INPUTS, dict(c, cu_seqlens=cu), torch.float32, ["y", "final_state"],
                       {"silu": 1})
    y, fin = session(model).run(None, feed_dict(dict(c, cu_seqlens=cu)))
    for s in range(4):
        a, b = int(cu[s]), int(cu[s + 1])
        y_r, fin_r = conv_ref(c["x"][:, :, a:b], c["weight"], c["bias"], c["init_state"][s:s + 1], True)
        assert rel_err(y[:, :, a:b], y_r) < 1e-6 and rel_err(fin[s:s + 1], fin_r) < 1e-7
    # the update: token by token against the forward over the whole sequence, with state_index
    c = make_conv(batch=3, L=6, init=True)
    y_full, _ = conv_ref(c["x"], c["weight"], c["bias"], c["init_state"], True)
    cache = torch.zeros(5, 24, 3)
    idx = torch.tensor([4, 0, 2], dtype=torch.int32)
    cache[idx.long()] = c["init_state"]
    sess = None
    for t in range(6):
        feeds = dict(state=cache, x=c["x"][:, :, t], weight=c["weight"], bias=c["bias"], state_index=idx)
        if sess is None:
            sess = session(conv_model("CausalConv1dUpdate", CONV_UPDATE_INPUTS, feeds, torch.float32,
                                      ["y", "state_out"], {"silu": 1}))
        y, cache_n = sess.run(None, feed_dict(feeds))
        assert rel_err(y, y_full[:, :, t]) < 1e-6
        assert np.array_equal(cache_n[[1, 3]], cache[[1, 3]].numpy())  # rows no batch row uses
        cache = torch.from_numpy(cache_n)
    with pytest.raises(Exception, match=r"input 'state_index'.*not below n_cache"):
        feeds = dict(feeds, state_index=torch.tensor([4, 0, 9], dtype=torch.int32))
        sess.run(None, feed_dict(feeds))
    with pytest.raises(Exception, match=r"input 'weight': wrong shape: want \(dim, width\)"):
        bad = dict(c, weight=c["weight"][:-1])
        session(conv_model("CausalConv1d", CONV_INPUTS, bad, torch.float32, ["y"], {})).run(None, feed_dict(bad))


# ---- errors: an ONNX Runtime error naming the input -----------------------------------------------


def test_iobinding_overlapping_state_and_last_state():
    """IOBinding: the step's state_out bound one cache row into its input state (a partial overlap, copied by
    memmove: memcpy there was undefined) gives the unbound run's results; the scan's last_state bound onto h0 is
    refused naming the node's last_state (selscan's h_last)."""
    s = make_step(batch=2, dim=8, N=5, n_cache=6)
    idx = torch.tensor([1, 3], dtype=torch.int32)
    want_y, want_state = run_step_ort(s, torch.float32, idx=idx)
    feeds = feed_dict(dict(s, state_index=idx))
    sess = session(one_node_model("SelectiveStateUpdate", STEP_INPUTS, dict(s, state_index=idx), {"x", "dt", "B", "C", "z"},
                                  torch.float32, ["y", "state_out"], {"y"}, {"dt_softplus": 1}))
    buf = np.zeros((7, 8, 5), np.float32)  # the state at rows 0-5, state_out at rows 1-6
    buf[:6] = feeds.pop("state")
    io = sess.io_binding()
    io.bind_input("state", "cpu", 0, np.float32, [6, 8, 5], buf.ctypes.data)
    for k, v in feeds.items():
        io.bind_cpu_input(k, v)
    io.bind_output("y", "cpu")
    io.bind_output("state_out", "cpu", 0, np.float32, [6, 8, 5], buf[1:].ctypes.data)
    sess.run_with_iobinding(io)
    assert np.array_equal(io.copy_outputs_to_cpu()[0], want_y)
    assert np.array_equal(buf[1:], want_state)
    x = make_scan(batch=2, dim=8, L=13, N=5, bc="var3", G=1, h0=True)
    x = {k: x[k] for k in SCAN_INPUTS if x.get(k) is not None}
    sess = session(one_node_model("SelectiveScan", SCAN_INPUTS, x, {"u", "delta", "z", "B", "C"}, torch.float32,
                                  ["y", "last_state"], {"y"}, {"delta_softplus": 1}))
    feeds = feed_dict(x)
    io = sess.io_binding()
    for k, v in feeds.items():
        io.bind_cpu_input(k, v)
    io.bind_output("y", "cpu")
    h0 = feeds["h0"]
    io.bind_output("last_state", "cpu", 0, np.float32, list(h0.shape), h0.ctypes.data)
    with pytest.raises(Exception, match=r"'last_state': overlaps h0"):
        sess.run_with_iobinding(io)


def selscan_message(e):
    """The library's message in an ONNX Runtime error ("selscan: <op>: ..."), without ONNX Runtime's prefix."""
    text = str(e)
    assert "selscan: " in text, text
    return text[text.index("selscan: "):].strip()


def scan_iobinding(L, h0_rows_at=0, last_rows_at=0):
    """A SelectiveScan node (batch 2, dim 8, N 5, length L) run through IOBinding with h0 and last_state in one
    buffer of 3 rows: h0 at rows h0_rows_at.., last_state at rows last_rows_at.. (0 and 0: the same memory;
    0 and 1: one row apart, a partial overlap). Returns (the error's selscan message or None, the buffer before,
    the buffer after)."""
    x = make_scan(batch=2, dim=8, L=L, N=5, bc="var3", G=1, h0=True)
    x = {k: x[k] for k in SCAN_INPUTS if x.get(k) is not None}
    sess = session(one_node_model("SelectiveScan", SCAN_INPUTS, x, {"u", "delta", "z", "B", "C"}, torch.float32,
                                  ["y", "last_state"], {"y"}, {"delta_softplus": 1}))
    feeds = feed_dict(x)
    buf = np.zeros((3, 8, 5), np.float32)
    buf[h0_rows_at:h0_rows_at + 2] = feeds.pop("h0")
    before = buf.copy()
    io = sess.io_binding()
    io.bind_input("h0", "cpu", 0, np.float32, [2, 8, 5], buf[h0_rows_at:].ctypes.data)
    for k, v in feeds.items():
        io.bind_cpu_input(k, v)
    io.bind_output("y", "cpu")
    io.bind_output("last_state", "cpu", 0, np.float32, [2, 8, 5], buf[last_rows_at:].ctypes.data)
    try:
        sess.run_with_iobinding(io)
    except Exception as e:  # noqa: BLE001  (ONNX Runtime's Fail / InvalidArgument)
        return selscan_message(e), before, buf
    return None, before, buf


def test_iobinding_refusals_call_an_output_an_output():
    """An output bound (IOBinding) over an input is refused naming the output as the node does, as an output:
    the scan's last_state (selscan's h_last), the step's y and state_out (selscan's state: before, "input 'state'",
    the node's input of that name, for an output bound over x), while inputs stay inputs."""
    msg, before, after = scan_iobinding(13)
    assert msg is not None and "(output 'last_state': overlaps h0)" in msg, msg
    assert np.array_equal(before, after)  # refused before anything is written
    s = make_step(batch=2, dim=8, N=5, n_cache=6)
    idx = torch.tensor([1, 3], dtype=torch.int32)
    sess = session(one_node_model("SelectiveStateUpdate", STEP_INPUTS, dict(s, state_index=idx),
                                  {"x", "dt", "B", "C", "z"}, torch.float32, ["y", "state_out"], {"y"}, {"dt_softplus": 1}))
    feeds = feed_dict(dict(s, state_index=idx))
    for out in ("y", "state_out"):
        buf = np.zeros(6 * 8 * 5, np.float32)  # x at its start, under the output
        buf[:16] = feeds["x"].ravel()
        before = buf.copy()
        io = sess.io_binding()
        io.bind_input("x", "cpu", 0, np.float32, [2, 8], buf.ctypes.data)
        for k, v in feeds.items():
            if k != "x":
                io.bind_cpu_input(k, v)
        shapes = {"y": [2, 8], "state_out": [6, 8, 5]}
        io.bind_output(out, "cpu", 0, np.float32, shapes[out], buf.ctypes.data)
        io.bind_output("state_out" if out == "y" else "y", "cpu")
        with pytest.raises(Exception) as e:
            sess.run_with_iobinding(io)
        msg = selscan_message(e.value)
        assert "(output '%s': overlaps x)" % out in msg, msg
        assert np.array_equal(buf, before)
    with pytest.raises(Exception, match=r"\(input 'state_index': .*not below n_cache"):
        session(one_node_model("SelectiveStateUpdate", STEP_INPUTS, dict(s, state_index=idx), {"x", "dt", "B", "C", "z"},
                               torch.float32, ["y", "state_out"], {"y"}, {"dt_softplus": 1})).run(
            None, feed_dict(dict(s, state_index=torch.tensor([1, 6], dtype=torch.int32))))


def test_iobinding_empty_scan_refuses_last_state_over_h0():
    """An empty scan (L = 0) refuses a last_state bound over h0, partly or exactly, with the non-empty scan's
    words, and leaves the buffer as it was (before: accepted, h0 copied into the overlapping last_state); without
    the overlap it still passes h0 through. The decode step's state_out over its state input stays accepted, empty
    or not (selscan never sees that input: it is copied first)."""
    for h0_at, last_at in ((0, 1), (1, 0), (0, 0)):
        want, _, _ = scan_iobinding(13, h0_at, last_at)
        assert want is not None and "(output 'last_state': overlaps h0)" in want, want
        msg, before, after = scan_iobinding(0, h0_at, last_at)
        assert msg == want, (msg, want)
        assert np.array_equal(before, after)
    # without an overlap: last_state is h0
    x = make_scan(batch=2, dim=8, L=0, N=5, bc="var3", G=1, h0=True)
    x = {k: x[k] for k in SCAN_INPUTS if x.get(k) is not None}
    _, last = run_scan_ort(x, torch.float32, True, True)
    assert np.array_equal(last, x["h0"].numpy())
    s = dict(make_step(batch=0, dim=8, N=5, n_cache=6), state_index=torch.zeros(0, dtype=torch.int32))
    sess = session(one_node_model("SelectiveStateUpdate", STEP_INPUTS, s, {"x", "dt", "B", "C", "z"}, torch.float32,
                                  ["y", "state_out"], {"y"}, {"dt_softplus": 1}))
    feeds = feed_dict(s)
    for off in (0, 1):  # in place, one row apart
        buf = np.zeros((7, 8, 5), np.float32)
        buf[:6] = feeds["state"]
        io = sess.io_binding()
        io.bind_input("state", "cpu", 0, np.float32, [6, 8, 5], buf.ctypes.data)
        for k, v in feeds.items():
            if k != "state":
                io.bind_cpu_input(k, v)
        io.bind_output("y", "cpu")
        io.bind_output("state_out", "cpu", 0, np.float32, [6, 8, 5], buf[off:].ctypes.data)
        sess.run_with_iobinding(io)
        assert np.array_equal(buf[off:off + 6], feeds["state"])


@conv_only
def test_iobinding_empty_conv_refuses_final_state_over_init_state():
    """The empty causal conv (L = 0) refuses a final_state bound one row into init_state as the non-empty one
    does, in the same words (before: accepted)."""
    msgs = []
    for L in (9, 0):
        c = make_conv(batch=2, dim=8, L=L, W=4, init=True)
        sess = session(conv_model("CausalConv1d", CONV_INPUTS, c, torch.float32, ["y", "final_state"], {"silu": 1}))
        feeds = feed_dict(c)
        buf = np.zeros((3, 8, 3), np.float32)
        buf[:2] = feeds.pop("init_state")
        before = buf.copy()
        io = sess.io_binding()
        io.bind_input("init_state", "cpu", 0, np.float32, [2, 8, 3], buf.ctypes.data)
        for k, v in feeds.items():
            io.bind_cpu_input(k, v)
        io.bind_output("y", "cpu")
        io.bind_output("final_state", "cpu", 0, np.float32, [2, 8, 3], buf[1:].ctypes.data)
        with pytest.raises(Exception) as e:
            sess.run_with_iobinding(io)
        msgs.append(selscan_message(e.value))
        assert np.array_equal(buf, before)
    assert "(output 'final_state': overlaps init_state)" in msgs[0] and msgs[1] == msgs[0], msgs


def test_errors_name_the_input():
    x = make_scan()

    def bad(match, **changes):
        y = dict(x, **{k: v for k, v in changes.items() if k != "cu"})
        with pytest.raises(Exception, match=match):
            run_scan_ort(y, torch.float32, True, True, cu=changes.get("cu"))

    bad(r"input 'delta': wrong shape", delta=x["delta"][:, :, :-1])
    bad(r"input 'A': wrong shape: want \(dim, N\)", A=x["A"][:-1])
    bad(r"input 'B': wrong shape: want \(batch, N, L\)", B=x["B"][:, :, :-1])
    bad(r"input 'C': wrong shape: want \(batch, G, N, L\) = \[2, 2, 5, 37\]", B=torch.randn(2, 2, 5, 37))
    bad(r"input 'B': does not divide dim", B=torch.randn(2, 3, 5, 37), C=torch.randn(2, 3, 5, 37))
    bad(r"input 'D': wrong shape: want \(dim,\)", D=torch.randn(3))
    bad(r"input 'h0': wrong shape: want \(batch, dim, N\)", h0=torch.randn(2, 8, 4))
    bad(r"input 'u': not 1 with cu_seqlens", cu=torch.tensor([0, 10, 37]))
    x1 = make_scan(batch=1)
    with pytest.raises(Exception, match=r"SELSCAN_ERR_SHAPE\] \(input 'cu_seqlens'"):  # selscan's diag
        run_scan_ort(x1, torch.float32, True, True, cu=torch.tensor([0, 20, 10, 37]))
    with pytest.raises(Exception, match=r"attribute 'delta_softplus' must be 0 or 1"):
        run_scan_ort(x, torch.float32, 2, True)
    s = make_step(batch=3, n_cache=4)
    with pytest.raises(Exception, match=r"input 'state_index'.*not below n_cache"):
        run_step_ort(s, torch.float32, idx=torch.tensor([0, 1, 7], dtype=torch.int32))
    with pytest.raises(Exception, match=r"input 'state_index'.*row used twice"):
        run_step_ort(s, torch.float32, idx=torch.tensor([0, 1, 1], dtype=torch.int32))
    with pytest.raises(Exception, match=r"input 'B': wrong shape: want \(batch, G, N\)"):
        run_step_ort(dict(s, B=s["B"][:, :, :-1]), torch.float32)
    # a wrong element type is refused by ONNX Runtime when the model loads (the kernels' type lists)
    feeds = dict(x)
    model = one_node_model("SelectiveScan", SCAN_INPUTS, feeds, {"u", "delta", "z", "B", "C"}, torch.float32, ["y"],
                           {"y"}, {})
    model.graph.input[2].type.tensor_type.elem_type = TensorProto.DOUBLE  # A as double
    with pytest.raises(Exception, match="SelectiveScan|Type"):
        session(model)


@pytest.mark.parametrize("value", [1.0, "1", [1], [1.0]], ids=["float", "string", "ints", "floats"])
@pytest.mark.parametrize("op", ["SelectiveScan", "SelectiveStateUpdate", "CausalConv1d", "CausalConv1dUpdate"])
def test_attribute_of_another_type_refused(op, value):
    # ONNX Runtime answers a missing attribute and a mistyped one alike: a float / string / list 0-1 flag
    # was taken as absent, its default (0) silently used
    if op.startswith("Causal") and not HAS_CONV:
        pytest.skip("the conv ops are not built into this library")
    if op == "SelectiveScan":
        feeds, names, t_in, outs, flag = make_scan(), SCAN_INPUTS, {"u", "delta", "z", "B", "C"}, ["y"], "delta_softplus"
    elif op == "SelectiveStateUpdate":
        feeds, names, t_in, outs, flag = make_step(), STEP_INPUTS, {"x", "dt", "B", "C", "z"}, ["y", "state_out"], \
            "dt_softplus"
    else:
        c = make_conv()
        feeds = c if op == "CausalConv1d" else dict(state=torch.randn(2, 24, 3), x=c["x"][:, :, 0],
                                                    weight=c["weight"], bias=c["bias"])
        names = CONV_INPUTS if op == "CausalConv1d" else CONV_UPDATE_INPUTS
        t_in, outs, flag = {"x", "init_state", "state"}, (["y"] if op == "CausalConv1d" else ["y", "state_out"]), "silu"
    model = one_node_model(op, names, feeds, t_in, torch.float32, outs, set(outs), {flag: value},
                           ranks={o: 2 if o == "y" and op.endswith("Update") else 3 for o in outs})
    with pytest.raises(Exception, match=rf"attribute '{flag}' must be an int \(0 or 1\), got another type"):
        session(model).run(None, feed_dict(feeds))


def test_misspelled_attribute_named_by_the_checker():
    # ONNX Runtime gives a custom kernel no list of its node's attributes; the registered schemas do
    sonnx.register_schemas()
    model = one_node_model("SelectiveScan", SCAN_INPUTS, make_scan(), {"u", "delta", "z", "B", "C"}, torch.float32,
                           ["y"], {"y"}, {"delta_softpuls": 1})
    with pytest.raises(Exception, match="Unrecognized attribute: delta_softpuls"):
        onnx.checker.check_model(model)


@pytest.mark.parametrize("cu", [[], [0]], ids=["no_offset", "one_offset"])
@pytest.mark.parametrize("op", ["SelectiveScan", "CausalConv1d"])
def test_cu_seqlens_without_a_sequence_says_so(op, cu):
    cu = torch.tensor(cu, dtype=torch.int64)
    match = r"input 'cu_seqlens': no sequence \(cu_seqlens needs n_seqs \+ 1 >= 2 offsets\)"
    if op == "SelectiveScan":
        with pytest.raises(Exception, match=match):
            run_scan_ort(make_scan(batch=1), torch.float32, True, False, cu=cu)
        return
    if not HAS_CONV:
        pytest.skip("the conv ops are not built into this library")
    c = dict(make_conv(batch=1), cu_seqlens=cu)
    with pytest.raises(Exception, match=match):
        run_conv_ort(c, outputs=("y",))


# ---- issue 38: every argument checked whatever the sizes ------------------------------------------


def run_conv_ort(c, outputs=("y", "final_state"), op="CausalConv1d"):
    names = CONV_INPUTS if op == "CausalConv1d" else CONV_UPDATE_INPUTS
    return session(conv_model(op, names, c, torch.float32, list(outputs), {})).run(None, feed_dict(c))


@pytest.mark.parametrize("cu", [[3, -1], [0, 5], [4, 2]], ids=str)
@pytest.mark.parametrize("empty", ["L0", "dim0"])
def test_38_5_scan_empty_checks_cu_seqlens(cu, empty):
    # selscan is not called on an empty problem: the offsets are checked all the same
    L = 0 if empty == "L0" else 4
    x = make_scan(batch=1, dim=0 if empty == "dim0" else 8, L=L, G=1)
    run_scan_ort(x, torch.float32, True, True, cu=torch.tensor([0, L]))  # good offsets pass
    with pytest.raises(Exception, match=r"SELSCAN_ERR_SHAPE\] \(input 'cu_seqlens': (first|last) offset"):
        run_scan_ort(x, torch.float32, True, True, cu=torch.tensor(cu))


@pytest.mark.parametrize("idx, match", [([0, 1, 7], r"input 'state_index'.*not below n_cache"),
                                        ([0, 1, 1], r"input 'state_index'.*row used twice"),
                                        (None, r"input 'state': not batch without state_index")])
def test_38_5_step_dim_0_checks_state_index(idx, match):
    s = make_step(batch=3, dim=0, n_cache=4)
    run_step_ort(s, torch.float32, idx=torch.tensor([0, -1, 3], dtype=torch.int32))  # good indices pass
    with pytest.raises(Exception, match=match):
        run_step_ort(s, torch.float32, idx=None if idx is None else torch.tensor(idx, dtype=torch.int32))


@conv_only
@pytest.mark.parametrize("case", ["cu 3,-1", "cu 0,5", "cu 4,2", "width 9", "update index"])
def test_38_5_conv_dim_0_checks_every_argument(case):
    if case == "update index":
        c = dict(state=torch.zeros(4, 0, 3), x=torch.zeros(3, 0), weight=torch.zeros(0, 4),
                 state_index=torch.tensor([0, 1, 7], dtype=torch.int32))
        with pytest.raises(Exception, match=r"input 'state_index'.*not below n_cache"):
            run_conv_ort(c, ("y", "state_out"), op="CausalConv1dUpdate")
        return
    c = make_conv(batch=1, dim=0, L=4, W=9 if case == "width 9" else 4)
    if case.startswith("cu"):
        c["cu_seqlens"] = torch.tensor([int(v) for v in case[3:].split(",")])
    match = r"input 'weight': not 2 to 4" if case == "width 9" else r"\(input 'cu_seqlens': (first|last) offset"
    with pytest.raises(Exception, match=match):
        run_conv_ort(c)


@conv_only
@pytest.mark.parametrize("init", [False, True])
def test_38_6_conv_accepts_empty_packed_sequences(init):
    cu = torch.tensor([0, 0, 0])  # L 0: two empty sequences, as SelectiveScan takes them
    c = dict(make_conv(batch=1, L=0, init=init, rows=2), cu_seqlens=cu)
    y, fin = run_conv_ort(c)
    assert y.shape == (1, 24, 0)
    assert np.array_equal(fin, c["init_state"].numpy() if init else np.zeros((2, 24, 3), np.float32))
    x = make_scan(batch=1, L=0, h0=True, n_seqs=2)
    _, last = run_scan_ort(x, torch.float32, True, True, cu=cu)
    assert np.array_equal(last, x["h0"].numpy())
    with pytest.raises(Exception, match=r"\(input 'cu_seqlens': last offset not seqlen"):  # the same rule
        run_conv_ort(dict(c, cu_seqlens=torch.tensor([0, 0, 1])))


@conv_only
@pytest.mark.parametrize("op, outputs", [("CausalConv1d", ("y", "final_state")), ("CausalConv1d", ("y",)),
                                         ("CausalConv1dUpdate", ("y", "state_out"))])
def test_38_7_conv_weight_width_0_names_weight(op, outputs):
    # before final_state (width - 1 = -1 wide) is shaped: selscan's error, naming weight
    if op == "CausalConv1d":
        c = make_conv(W=0)
    else:
        c = dict(state=torch.zeros(2, 24, 3), x=torch.randn(2, 24), weight=torch.zeros(24, 0))
    with pytest.raises(Exception, match=r"selscan: CausalConv1d(Update)?: .*\(input 'weight': not positive: width=0\)"):
        run_conv_ort(c, outputs, op=op)


# ---- export: models calling selscan's functions -> selscan nodes -> ONNX Runtime ------------------


def export(model, args, **kw):
    """torch.onnx.export(dynamo=True) after `import selscan_torch.onnx`; checks the model."""
    model.eval()
    with torch.no_grad():
        prog = torch.onnx.export(model, args, dynamo=True, **kw)
    proto = prog.model_proto
    onnx.checker.check_model(proto, full_check=True)
    if _schemas_infer():
        inferred = _inferred(proto)  # every selscan node's outputs typed and shaped by the schemas
        for n in proto.graph.node:
            if n.domain == sonnx.DOMAIN:
                assert all(inferred.get(o, (0, None))[1] is not None and inferred[o][0] for o in n.output if o), n
    return proto


def op_types(proto):
    return [(n.domain, n.op_type) for n in proto.graph.node]


def run_proto(proto, args, threads=None):
    sess = session(proto, threads)
    return sess.run(None, {i.name: a.numpy() for i, a in zip(sess.get_inputs(), args)})


class MambaBlock(torch.nn.Module):
    """Mamba-1's mixer: in_proj, causal depthwise conv (torch's conv1d), x_proj, dt_proj, the scan
    (selective_scan_fn, z gating, D, delta_bias, softplus), out_proj. step(): one decode token on
    explicit (conv_state, ssm_state), returning the new states (ONNX has no in-place update)."""

    def __init__(self, d_model=16, d_state=8, expand=2, dt_rank=4, d_conv=4):
        super().__init__()
        d_inner = expand * d_model
        self.d_inner, self.r, self.n, self.k = d_inner, dt_rank, d_state, d_conv
        self.in_proj = torch.nn.Linear(d_model, 2 * d_inner)
        self.conv = torch.nn.Conv1d(d_inner, d_inner, d_conv, groups=d_inner, padding=d_conv - 1)
        self.x_proj = torch.nn.Linear(d_inner, dt_rank + 2 * d_state, bias=False)
        self.dt_proj = torch.nn.Linear(dt_rank, d_inner)
        self.A_log = torch.nn.Parameter(torch.log(torch.arange(1, d_state + 1.0)).repeat(d_inner, 1))
        self.D = torch.nn.Parameter(torch.ones(d_inner))
        self.out_proj = torch.nn.Linear(d_inner, d_model)

    def forward(self, h, return_states=False):  # (batch, L, d_model)
        L = h.shape[1]
        x, z = self.in_proj(h).chunk(2, dim=-1)
        xt = x.transpose(1, 2)
        xc = F.silu(self.conv(xt)[..., :L])  # (batch, d_inner, L)
        dt, B, C = self.x_proj(xc.transpose(1, 2)).split([self.r, self.n, self.n], dim=-1)
        delta = (dt @ self.dt_proj.weight.t()).transpose(1, 2)
        A = -torch.exp(self.A_log)
        y, last = st.selective_scan_fn(xc, delta, A, B.transpose(1, 2), C.transpose(1, 2), self.D, z=z.transpose(1, 2),
                                       delta_bias=self.dt_proj.bias, delta_softplus=True, return_last_state=True)
        out = self.out_proj(y.transpose(1, 2))
        if not return_states:
            return out
        conv_state = F.pad(xt, (self.k - L, 0)) if L < self.k else xt[..., L - self.k:]
        return out, conv_state, last

    def step(self, h, conv_state, ssm_state):  # h (batch, d_model); conv_state (batch, d_inner, d_conv)
        x, z = self.in_proj(h).chunk(2, dim=-1)
        conv_state = torch.cat([conv_state[:, :, 1:], x[:, :, None]], dim=-1)
        xc = F.silu((conv_state * self.conv.weight[:, 0, :]).sum(-1) + self.conv.bias)
        dt, B, C = self.x_proj(xc).split([self.r, self.n, self.n], dim=-1)
        delta = dt @ self.dt_proj.weight.t()
        y = st.selective_state_update(ssm_state, xc, delta, -torch.exp(self.A_log), B, C, self.D, z=z,
                                      dt_bias=self.dt_proj.bias, dt_softplus=True)
        return self.out_proj(y), conv_state, ssm_state


class Prefill(torch.nn.Module):
    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, h):
        return self.block(h, return_states=True)


class Step(torch.nn.Module):
    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, h, conv_state, ssm_state):
        return self.block.step(h, conv_state, ssm_state)


def test_export_mamba_block():
    torch.manual_seed(0)
    block = MambaBlock().eval()
    h = torch.randn(2, 40, 16)
    proto = export(block, (h,))
    ops = op_types(proto)
    assert ("selscan", "SelectiveScan") in ops and not any(t in ("Loop", "Scan") for _, t in ops)
    assert rel_err(run_proto(proto, (h,))[0], block(h)) < 1e-5


def test_export_dynamic_shapes():
    """One export for any batch and length (prefill of any prompt)."""
    torch.manual_seed(0)
    block = MambaBlock().eval()
    h = torch.randn(2, 40, 16)
    b, L = torch.export.Dim("batch", min=1, max=64), torch.export.Dim("L", min=2, max=4096)
    proto = export(block, (h,), dynamic_shapes=({0: b, 1: L},))
    sess = session(proto)
    for shape in [(1, 7, 16), (3, 200, 16), (2, 40, 16)]:
        x = torch.randn(*shape)
        (y,) = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})
        assert rel_err(y, block(x)) < 1e-5, shape


def test_export_prefill_then_decode():
    """Prefill exported with the last states, the decode step exported with explicit state inputs and
    outputs; a few decode steps in ONNX Runtime against PyTorch eager, and against running the whole
    sequence through the prefill model."""
    torch.manual_seed(0)
    block = MambaBlock().eval()
    h = torch.randn(2, 12, 16)
    extra = torch.randn(2, 4, 16)
    prefill = export(Prefill(block), (h,))
    conv0 = torch.zeros(2, block.d_inner, block.k)
    ssm0 = torch.zeros(2, block.d_inner, block.n)
    step = export(Step(block), (h[:, 0], conv0, ssm0))
    ops = op_types(step)
    assert ("selscan", "SelectiveStateUpdate") in ops
    out, conv, ssm = run_proto(prefill, (h,))
    with torch.no_grad():
        out_t, conv_t, ssm_t = Prefill(block)(h)
    assert rel_err(out, out_t) < 1e-5 and rel_err(conv, conv_t) < 1e-6 and rel_err(ssm, ssm_t) < 1e-5
    conv, ssm = torch.from_numpy(conv), torch.from_numpy(ssm)
    sess = session(step)
    names = [i.name for i in sess.get_inputs()]
    ys = []
    for t in range(extra.shape[1]):
        y, conv_n, ssm_n = sess.run(None, dict(zip(names, [extra[:, t].numpy(), conv.numpy(), ssm.numpy()])))
        with torch.no_grad():
            y_t, conv_t, ssm_t = Step(block)(extra[:, t], conv_t, ssm_t.clone())
        assert rel_err(y, y_t) < 1e-5 and rel_err(ssm_n, ssm_t) < 1e-5 and rel_err(conv_n, conv_t) < 1e-6
        conv, ssm = torch.from_numpy(conv_n), torch.from_numpy(ssm_n)
        ys.append(torch.from_numpy(y))
    with torch.no_grad():  # decode == running the longer sequence at once
        full = block(torch.cat([h, extra], dim=1))[:, 12:]
    assert rel_err(torch.stack(ys, 1), full) < 1e-4


class MambaVisionMixer(torch.nn.Module):
    """MambaVision's token mixer (NVlabs/MambaVision, MambaVisionMixer): in_proj, x / z halves, each a
    'same'-padded depthwise conv and SiLU, x_proj, dt_proj, the scan on the x half (no z gating,
    delta_bias = dt_proj's bias, softplus), concat with the z half, out_proj."""

    def __init__(self, d_model=32, d_state=8, d_conv=3, expand=1):
        super().__init__()
        d_inner = expand * d_model
        self.dt_rank = math.ceil(d_model / 16)
        self.n = d_state
        self.in_proj = torch.nn.Linear(d_model, d_inner, bias=False)
        self.x_proj = torch.nn.Linear(d_inner // 2, self.dt_rank + 2 * d_state, bias=False)
        self.dt_proj = torch.nn.Linear(self.dt_rank, d_inner // 2, bias=True)
        self.A_log = torch.nn.Parameter(torch.log(torch.arange(1, d_state + 1.0)).repeat(d_inner // 2, 1))
        self.D = torch.nn.Parameter(torch.ones(d_inner // 2))
        self.out_proj = torch.nn.Linear(d_inner, d_model, bias=False)
        self.conv1d_x = torch.nn.Conv1d(d_inner // 2, d_inner // 2, d_conv, groups=d_inner // 2, bias=False)
        self.conv1d_z = torch.nn.Conv1d(d_inner // 2, d_inner // 2, d_conv, groups=d_inner // 2, bias=False)

    def forward(self, hidden_states):  # (batch, L, d_model)
        L = hidden_states.shape[1]
        xz = self.in_proj(hidden_states).transpose(1, 2)
        x, z = xz.chunk(2, dim=1)
        A = -torch.exp(self.A_log.float())
        x = F.silu(F.conv1d(x, self.conv1d_x.weight, self.conv1d_x.bias, padding="same", groups=x.shape[1]))
        z = F.silu(F.conv1d(z, self.conv1d_z.weight, self.conv1d_z.bias, padding="same", groups=z.shape[1]))
        x_dbl = self.x_proj(x.transpose(1, 2).reshape(-1, x.shape[1]))
        dt, B, C = torch.split(x_dbl, [self.dt_rank, self.n, self.n], dim=-1)
        dt = self.dt_proj(dt).reshape(-1, L, x.shape[1]).transpose(1, 2)
        B = B.reshape(-1, L, self.n).transpose(1, 2).contiguous()
        C = C.reshape(-1, L, self.n).transpose(1, 2).contiguous()
        y = st.selective_scan_fn(x, dt, A, B, C, self.D.float(), z=None, delta_bias=self.dt_proj.bias.float(),
                                 delta_softplus=True)
        y = torch.cat([y, z], dim=1).transpose(1, 2)
        return self.out_proj(y)


def test_export_mambavision_mixer():
    torch.manual_seed(0)
    mixer = MambaVisionMixer().eval()
    x = torch.randn(2, 49, 32)  # a 7x7 window of tokens
    proto = export(mixer, (x,))
    assert ("selscan", "SelectiveScan") in op_types(proto)
    for threads in (1, 2):
        assert rel_err(run_proto(proto, (x,), threads)[0], mixer(x)) < 1e-5


def test_export_multihead_step_and_state_views():
    """selective_state_update's Mamba-2 shapes (heads folded into channels by views) and a state that
    is one layer of a cache tensor returned by the model."""

    class Heads(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.A = torch.nn.Parameter(-torch.rand(2, 4, 6) - 0.3)

        def forward(self, cache, x, dt, B, C):  # cache (layers, batch, heads, hdim, N)
            y = st.selective_state_update(cache[1], x, dt, self.A, B, C, dt_softplus=True)
            return y, cache

    torch.manual_seed(0)
    m = Heads()
    cache, x, dt = torch.randn(3, 2, 2, 4, 6), torch.randn(2, 2, 4), torch.randn(2, 2, 4)
    B, C = torch.randn(2, 6), torch.randn(2, 6)
    proto = export(m, (cache.clone(), x, dt, B, C))
    y, cache_out = run_proto(proto, (cache, x, dt, B, C))
    cache_t = cache.clone()
    with torch.no_grad():
        y_t, _ = m(cache_t, x, dt, B, C)
    assert rel_err(y, y_t) < 1e-6 and rel_err(cache_out, cache_t) < 1e-6
    assert np.array_equal(cache_out[[0, 2]], cache[[0, 2]].numpy())  # the other layers untouched


def test_export_selective_scan_module():
    """selscan_torch.SelectiveScan (the scan's own parameters): forward with h0 and the last state,
    and its decode step."""

    class Fwd(torch.nn.Module):
        def __init__(self, ssm):
            super().__init__()
            self.ssm = ssm

        def forward(self, u, delta, B, C, z, h0):
            return self.ssm(u, delta, B, C, z=z, h0=h0, return_last_state=True)

    class StepM(torch.nn.Module):
        def __init__(self, ssm):
            super().__init__()
            self.ssm = ssm

        def forward(self, state, x, dt, B, C, z):
            return self.ssm.step(state, x, dt, B, C, z), state

    torch.manual_seed(0)
    ssm = st.SelectiveScan(24, d_state=6)
    x = make_scan(dim=24, N=6, L=33, h0=True)
    args = (x["u"], x["delta"], x["B"], x["C"], x["z"], x["h0"])
    proto = export(Fwd(ssm), args)
    y, last = run_proto(proto, args)
    with torch.no_grad():
        y_t, last_t = Fwd(ssm)(*args)
    # (A = -exp(A_log) is computed by ONNX Runtime's Exp here: equal to rounding, not bitwise)
    assert rel_err(y, y_t) < 1e-5 and rel_err(last, last_t) < 1e-5
    s = make_step(batch=2, dim=24, N=6)
    sargs = (s["state"], s["x"], s["dt"], s["B"][:, 0], s["C"][:, 0], s["z"])
    proto = export(StepM(ssm), tuple(a.clone() for a in sargs))
    y, state_out = run_proto(proto, sargs)
    state_t = s["state"].clone()
    with torch.no_grad():
        y_t, _ = StepM(ssm)(state_t, *sargs[1:])
    assert rel_err(y, y_t) < 1e-5 and rel_err(state_out, state_t) < 1e-5


# ---- the two export routes: torch's default registry (the import) and the explicit table ----------


def _selscan_entries(registry):
    return [m for m in registry if getattr(m.fx_target, "namespace", None) == "selscan"]


@pytest.fixture
def without_default_registration(monkeypatch):
    """torch's default translation registry without the entries `import selscan_torch.onnx` added:
    what a torch where the import could not add them exports with."""
    from torch.onnx._internal.exporter._torchlib import _torchlib_registry as reg

    kept = [m for m in reg.get_torchlib_ops() if getattr(m.fx_target, "namespace", None) != "selscan"]
    monkeypatch.setattr(reg, "_registry", kept)
    return reg


CONV_EXPORT = HAS_CONV and sonnx.HAS_CONV  # the conv ops in both the library and selscan_torch


class DecodeStep(torch.nn.Module):
    """One decode token on selscan's own in-place updates: the conv update (where selscan has it)
    and the scan's step, on explicit states returned as outputs."""

    def __init__(self, dim=8, N=4, W=4):
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.w = torch.nn.Parameter(torch.randn(dim, W, generator=g) * 0.5)
        self.b = torch.nn.Parameter(torch.randn(dim, generator=g))
        self.A = torch.nn.Parameter(-torch.rand(dim, N, generator=g) - 0.1)
        self.D = torch.nn.Parameter(torch.randn(dim, generator=g))

    def forward(self, x, conv_state, ssm_state, dt, B, C):
        if CONV_EXPORT:
            x = st.causal_conv1d_update(x, conv_state, self.w, self.b, "silu")
        y = st.selective_state_update(ssm_state, x, dt, self.A, B, C, self.D, dt_softplus=True)
        return y, conv_state, ssm_state


def _decode_args(batch=2, dim=8, N=4, W=4):
    g = torch.Generator().manual_seed(4)
    r = lambda *shape: torch.randn(*shape, generator=g)  # noqa: E731
    return (r(batch, dim), r(batch, dim, W - 1), r(batch, dim, N), r(batch, dim), r(batch, N), r(batch, N))


def test_default_registry_route():
    """`import selscan_torch.onnx` added every translation of custom_translation_table() to torch's
    default registry, once (adding again adds nothing): a plain torch.onnx.export(dynamo=True), as
    the export() helper above calls it, emits selscan nodes."""
    from torch.onnx._internal.exporter._torchlib import _torchlib_registry as reg

    assert sonnx._registered_by_default is True
    table = sonnx.custom_translation_table()
    entries = _selscan_entries(reg._registry)
    assert {m.fx_target: m.onnx_function for m in entries} == table and len(entries) == len(table)
    assert sonnx._add_to_torch_default_registry() is True
    assert len(_selscan_entries(reg._registry)) == len(table)
    args = _decode_args()
    proto = export(DecodeStep(), tuple(a.clone() for a in args))
    assert ("selscan", "SelectiveStateUpdate") in op_types(proto)
    assert CONV_EXPORT == (("selscan", "CausalConv1dUpdate") in op_types(proto))


def test_explicit_table_route(without_default_registration, tmp_path):
    """torch's public API alone: with selscan's entries out of torch's default registry, a plain
    torch.onnx.export cannot translate the selscan ops; torch.onnx.export(...,
    custom_translation_table=custom_translation_table()) exports prefill (scan) and decode (step,
    conv update) as selscan nodes, and selscan_torch.onnx.export (which writes the file) too."""
    torch.manual_seed(0)
    block = MambaBlock().eval()
    h = torch.randn(1, 9, 16)
    with torch.no_grad():
        with pytest.raises(torch.onnx.OnnxExporterError):
            torch.onnx.export(block, (h,), dynamo=True)
        prog = torch.onnx.export(block, (h,), dynamo=True, custom_translation_table=sonnx.custom_translation_table())
        path = str(tmp_path / "block.onnx")
        sonnx.export(block, (h,), path)
    for proto in (prog.model_proto, onnx.load(path)):
        onnx.checker.check_model(proto, full_check=True)
        assert ("selscan", "SelectiveScan") in op_types(proto)
        assert rel_err(run_proto(proto, (h,))[0], block(h)) < 1e-5
    step, args = DecodeStep().eval(), _decode_args()
    with torch.no_grad():
        prog = torch.onnx.export(step, tuple(a.clone() for a in args), dynamo=True,
                                 custom_translation_table=sonnx.custom_translation_table())
        y_t, conv_t, ssm_t = step(*(a.clone() for a in args))
    proto = prog.model_proto
    onnx.checker.check_model(proto, full_check=True)
    ops = op_types(proto)
    assert ("selscan", "SelectiveStateUpdate") in ops and CONV_EXPORT == (("selscan", "CausalConv1dUpdate") in ops)
    y, conv, ssm = run_proto(proto, args)
    assert rel_err(y, y_t) < 1e-5 and rel_err(ssm, ssm_t) < 1e-5 and rel_err(conv, conv_t) < 1e-6


def test_default_registry_degrades_to_the_explicit_table(monkeypatch, without_default_registration):
    """Where torch has no default registry selscan can add to (torch < 2.7, or a release that moved
    it), the registration warns naming custom_translation_table, returns False and raises nothing."""
    reg = without_default_registration
    before = list(reg._registry)
    monkeypatch.setattr(torch, "__version__", "2.5.1")
    with pytest.warns(UserWarning, match=r"torch 2\.5\.1 .*custom_translation_table=selscan_torch\.onnx"):
        assert sonnx._add_to_torch_default_registry() is False
    assert reg._registry == before
    monkeypatch.setattr(torch, "__version__", "2.99.0")
    monkeypatch.delattr(reg, "_registry")
    with pytest.warns(UserWarning, match=r"could not add the selscan ops.*custom_translation_table=selscan_torch\.onnx"):
        assert sonnx._add_to_torch_default_registry() is False


def test_import_on_a_torch_without_the_registry():
    """`import selscan_torch.onnx` under a torch that reports 2.5 (a fresh interpreter): one warning,
    no error; the hooks and the explicit table are there."""
    import os
    import subprocess
    import sys

    code = ("import warnings, torch\n"
            "torch.__version__ = '2.5.0'\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    import selscan_torch, selscan_torch.onnx as so\n"
            "msgs = [str(x.message) for x in w if 'selscan_torch.onnx' in str(x.message)]\n"
            "assert len(msgs) == 1 and 'custom_translation_table=' in msgs[0], msgs\n"
            "assert so._registered_by_default is False and len(so.custom_translation_table()) >= 2\n"
            "assert selscan_torch._onnx_step is not None\n"
            "print('ok')\n")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(st.__file__))))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


# ---- transformers' MambaForCausalLM through selscan_torch.integrations -------------------------


def _transformers_lm():
    transformers = pytest.importorskip("transformers")
    integrations = pytest.importorskip("selscan_torch.integrations", reason="selscan_torch.integrations not built in")
    if not hasattr(st, "causal_conv1d_fn"):
        pytest.skip("selscan_torch without the causal conv1d ops")
    cfg = transformers.MambaConfig(vocab_size=64, hidden_size=32, state_size=8, num_hidden_layers=2, expand=2,
                                   conv_kernel=4, use_cache=False)
    torch.manual_seed(0)
    return transformers, integrations, transformers.MambaForCausalLM(cfg).eval()


def test_export_transformers_mamba_prefill():
    """MambaForCausalLM (a small config) with selscan_torch.integrations.use_in_transformers(): its
    mixers call selscan's conv and scan, which export as CausalConv1d / SelectiveScan nodes."""
    transformers, integrations, model = _transformers_lm()

    class Logits(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids):
            return self.m(input_ids=ids, use_cache=False).logits

    ids = torch.randint(0, 64, (2, 12))
    with integrations.use_in_transformers():
        lm = Logits(model)
        with torch.no_grad():
            ref = lm(ids)
        proto = export(lm, (ids,), dynamic_shapes=({1: torch.export.Dim("L", min=2, max=4096)},))
    ops = op_types(proto)
    assert ops.count(("selscan", "SelectiveScan")) == 2 and ops.count(("selscan", "CausalConv1d")) == 2
    assert not any(t in ("Loop", "Scan") for _, t in ops)
    assert rel_err(run_proto(proto, (ids,))[0], ref) < 1e-5
    ids2 = torch.randint(0, 64, (2, 30))  # another length through the same model
    with integrations.use_in_transformers(), torch.no_grad():
        assert rel_err(run_proto(proto, (ids2,))[0], lm(ids2)) < 1e-5


def test_export_transformers_mamba_decode():
    """The decode step of MambaForCausalLM on explicit per-layer states (stacked conv and ssm states in,
    the updated ones out): a few greedy tokens in ONNX Runtime against transformers in PyTorch."""
    transformers, integrations, model = _transformers_lm()
    cache_utils = pytest.importorskip("transformers.cache_utils")
    if not hasattr(cache_utils, "LinearAttentionCacheLayerMixin"):
        pytest.skip("this transformers keeps Mamba's states in another cache class")
    n_layers = model.config.num_hidden_layers

    def cache_from(conv, ssm):
        cache = cache_utils.DynamicCache(config=model.config)
        for i in range(n_layers):
            layer = cache.layers[i]
            layer.conv_states[0], layer.recurrent_states[0] = conv[i], ssm[i]
            layer.is_conv_states_initialized[0] = layer.is_recurrent_states_initialized[0] = True
            layer.has_previous_state[0] = True
            layer.conv_kernel_size[0] = conv.shape[-1]
            layer.dtype, layer.device = conv.dtype, conv.device
        return cache

    class Prefill(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids):
            out = self.m(input_ids=ids, use_cache=True)
            layers = out.cache.layers
            return (out.logits[:, -1], torch.stack([l.conv_states[0] for l in layers]),
                    torch.stack([l.recurrent_states[0] for l in layers]))

    class Decode(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids, conv, ssm):
            out = self.m(input_ids=ids, cache=cache_from(conv, ssm), use_cache=True)
            return out.logits[:, -1], conv, ssm

    ids = torch.randint(0, 64, (2, 9))
    with integrations.use_in_transformers():
        prefill, decode = Prefill(model), Decode(model)
        with torch.no_grad():
            logits, conv, ssm = prefill(ids)
        p_proto = export(prefill, (ids,))
        d_proto = export(decode, (ids[:, :1], conv.clone(), ssm.clone()))
        ops = op_types(d_proto)
        assert ("selscan", "SelectiveStateUpdate") in ops and ("selscan", "CausalConv1dUpdate") in ops
        o_logits, o_conv, o_ssm = run_proto(p_proto, (ids,))
        assert rel_err(o_logits, logits) < 1e-5 and rel_err(o_ssm, ssm) < 1e-5 and rel_err(o_conv, conv) < 1e-6
        sess = session(d_proto)
        names = [i.name for i in sess.get_inputs()]
        tok = torch.from_numpy(o_logits).argmax(-1, keepdim=True)
        tokens = [tok]
        o_conv, o_ssm = torch.from_numpy(o_conv), torch.from_numpy(o_ssm)
        for _ in range(4):
            with torch.no_grad():
                logits, conv, ssm = decode(tok, conv.clone(), ssm.clone())
            o_logits, o_conv, o_ssm = [torch.from_numpy(a) for a in
                                       sess.run(None, dict(zip(names, [tok.numpy(), o_conv.numpy(), o_ssm.numpy()])))]
            assert rel_err(o_logits, logits) < 1e-4 and rel_err(o_ssm, ssm) < 1e-4 and rel_err(o_conv, conv) < 1e-5
            tok = o_logits.argmax(-1, keepdim=True)
            tokens.append(tok)
        with torch.no_grad():  # the greedy tokens are transformers' own generate()'s
            gen = model.generate(ids, max_new_tokens=5, do_sample=False, use_cache=True)
    assert torch.equal(torch.cat(tokens, dim=1), gen[:, 9:])


@pytest.mark.parametrize("op", ["SelectiveStateUpdate", "CausalConv1dUpdate"])
def test_38_host_empty_cache_all_padding(op):
    """A cache of 0 rows with every state_index padding: y 0, state_out empty (selscan reads
    n_cache 0 as batch: the op answered 'input state: missing'); a row index is still refused."""
    idx = torch.tensor([-1, -1], dtype=torch.int32)
    if op == "SelectiveStateUpdate":
        s = make_step(batch=2, dim=4, N=3, n_cache=1)
        s["state"] = s["state"][:0]
        run = lambda i: run_step_ort(s, torch.float32, idx=i)  # noqa: E731
    else:
        if not HAS_CONV:
            pytest.skip("no conv ops")
        c = dict(state=torch.zeros(0, 4, 3), x=torch.randn(2, 4), weight=torch.randn(4, 4))
        run = lambda i: run_conv_ort(dict(c, state_index=i), ("y", "state_out"), op=op)  # noqa: E731
    y, state_out = run(idx)
    assert y.shape == (2, 4) and not y.any() and state_out.shape[0] == 0
    with pytest.raises(Exception, match=r"input 'state_index'.*not below n_cache"):
        run(torch.tensor([-1, 0], dtype=torch.int32))


# ---- issue 39: the standalone library, and every empty call -----------------------------------------


def test_39_library_is_the_one_asked_for():
    """LIB is SELSCAN_ORT_LIBRARY where set (make test-onnx's second run: the standalone `make
    ort-ops` artifact), else the wheel's copy next to selscan_torch.onnx."""
    env = os.environ.get("SELSCAN_ORT_LIBRARY")
    if env:
        assert os.path.samefile(LIB, env)
    else:
        assert os.path.dirname(os.path.abspath(LIB)) == os.path.dirname(os.path.abspath(sonnx.__file__))


def _snapshot(feeds):
    return {k: v.clone() for k, v in feeds.items() if v is not None}


def _untouched(feeds, snap):
    return all(torch.equal(feeds[k], v) for k, v in snap.items())


@pytest.mark.parametrize("case", ["batch0", "dim0", "L0"])
def test_39_scan_empty_calls(case):
    """An empty scan (batch, dim or L 0, N 0 with it): y empty, last_state h0; inputs untouched."""
    batch, dim, L = {"batch0": (0, 8, 5), "dim0": (2, 0, 5), "L0": (2, 8, 0)}[case]
    x = make_scan(batch=batch, dim=dim, L=L, G=1, h0=True)
    snap = _snapshot(x)
    y, last = run_scan_ort(x, torch.float32, True, True)
    assert y.shape == (batch, dim, L) and np.array_equal(last, x["h0"].numpy())
    assert _untouched(x, snap)
    x = make_scan(batch=batch, dim=dim, L=L, N=0, G=1)  # N 0 only on an empty problem
    y, last = run_scan_ort(x, torch.float32, True, True)
    assert y.shape == (batch, dim, L) and last.shape == (batch, dim, 0)


@pytest.mark.parametrize("case", ["batch0", "dim0", "ncache0"])
def test_39_step_empty_calls(case):
    """An empty step (batch or dim 0, or a cache of no rows with every row padding): y 0,
    state_out = state; inputs untouched; n_cache 0 without state_index refused by name."""
    batch, dim, n_cache = {"batch0": (0, 4, 2), "dim0": (2, 0, 2), "ncache0": (2, 4, 0)}[case]
    s = make_step(batch=batch, dim=dim, N=3, n_cache=n_cache or 1)
    s["state"] = s["state"][:n_cache]
    idx = torch.full((batch,), -1, dtype=torch.int32)
    snap = _snapshot(dict(s, state_index=idx))
    y, state_out = run_step_ort(s, torch.float32, idx=idx)
    assert y.shape == (batch, dim) and not y.any() and np.array_equal(state_out, s["state"].numpy())
    assert _untouched(dict(s, state_index=idx), snap)
    if case == "ncache0":
        with pytest.raises(Exception, match=r"input 'state'.*not batch without state_index"):
            run_step_ort(s, torch.float32)


@conv_only
@pytest.mark.parametrize("case", ["batch0", "dim0", "L0"])
def test_39_conv_empty_calls(case):
    """An empty conv (batch, dim or L 0): y empty, final_state init_state; inputs untouched."""
    batch, dim, L = {"batch0": (0, 6, 5), "dim0": (2, 0, 5), "L0": (2, 6, 0)}[case]
    c = make_conv(batch=batch, dim=dim, L=L, W=3, init=True)
    snap = _snapshot(c)
    y, fin = run_conv_ort(c)
    assert y.shape == (batch, dim, L) and np.array_equal(fin, c["init_state"].numpy())
    assert _untouched(c, snap)


@conv_only
@pytest.mark.parametrize("case", ["batch0", "dim0", "L0", "ncache0"])
def test_39_conv_update_empty_calls(case):
    """An empty conv update (batch, dim or seqlen 0, or a cache of no rows with every row padding):
    y 0, state_out = state; inputs untouched."""
    batch, dim, L, n_cache = {"batch0": (0, 4, 1, 2), "dim0": (2, 0, 1, 2), "L0": (2, 4, 0, 2),
                              "ncache0": (2, 4, 1, 0)}[case]
    g = torch.Generator().manual_seed(3)
    c = dict(state=torch.randn(n_cache, dim, 3, generator=g), x=torch.randn(batch, dim, L, generator=g),
             weight=torch.randn(dim, 4, generator=g), bias=torch.randn(dim, generator=g),
             state_index=torch.full((batch,), -1, dtype=torch.int32))
    snap = _snapshot(c)
    y, state_out = run_conv_ort(c, ("y", "state_out"), op="CausalConv1dUpdate")
    assert y.shape == (batch, dim, L) and not y.any() and np.array_equal(state_out, c["state"].numpy())
    assert _untouched(c, snap)


# ---- the schemas' output types and shapes (onnx.shape_inference) against what ONNX Runtime returns ----


def _inferred(model):
    """{value name: (element type, [dim_value, dim_param or None, ...])} after onnx's strict shape inference."""
    m = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    out = {}
    for v in list(m.graph.value_info) + list(m.graph.output):
        t = v.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else d.dim_param or None for d in t.shape.dim] \
            if t.HasField("shape") else None
        out[v.name] = (t.elem_type, dims)
    return out


def _schemas_infer():
    """Whether the registered schemas carry inference functions (onnx >= 1.16 takes them from Python)."""
    sonnx.register_schemas()
    return hasattr(onnx.defs.get_schema("SelectiveScan", 1, sonnx.DOMAIN), "set_type_and_shape_inference_function")


@pytest.fixture
def schemas_infer():
    if not _schemas_infer():
        pytest.skip(f"onnx {onnx.__version__} takes no inference function from Python")


def _infer_node(op, inputs, names, outs, **attrs):
    """_inferred of a model of one selscan node: inputs as value infos, names the node's inputs."""
    node = helper.make_node(op, names, outs, domain="selscan", **attrs)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info(o, 0, None) for o in outs])
    return _inferred(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("selscan", 1)]))


def _unknown(dim):
    return dim is None or str(dim).startswith("unk__")  # (onnx names a dim it does not know unk__N)


SHAPE_CASES = {
    "scan": ("SelectiveScan", dict(batch=2), {}, None, ["y", "last_state"]),
    "scan-bf16": ("SelectiveScan", dict(batch=3, bc="grouped", z=True, h0=True), {}, torch.bfloat16, ["y", "last_state"]),
    "scan-cu": ("SelectiveScan", dict(batch=1, L=20), {}, None, ["y", "last_state"]),
    "scan-no-state": ("SelectiveScan", dict(batch=2), {"return_last_state": 0}, None, ["y", "last_state"]),
    "step": ("SelectiveStateUpdate", {}, {}, torch.float16, ["y", "state_out"]),
    "conv": ("CausalConv1d", {}, {}, None, ["y", "final_state"]),
    "conv-cu-f16": ("CausalConv1d", dict(batch=1), {}, torch.float16, ["y", "final_state"]),
    "conv-no-state": ("CausalConv1d", {}, {"return_final_state": 0}, None, ["y", "final_state"]),
    "conv-update": ("CausalConv1dUpdate", {}, {}, None, ["y", "state_out"]),
}


@pytest.mark.parametrize("case", list(SHAPE_CASES))
def test_schemas_infer_the_outputs_ort_returns(case, schemas_infer):
    op, kw, attrs, T, outs = SHAPE_CASES[case]
    T = T or torch.float32
    if op.startswith("Causal") and not HAS_CONV:
        pytest.skip("the conv ops are not built into this library")
    if op == "SelectiveScan":
        feeds, names, t_in = make_scan(**kw), SCAN_INPUTS, {"u", "delta", "z", "B", "C"}
        if case == "scan-cu":
            feeds["cu_seqlens"] = torch.tensor([0, 7, 7, 20])
    elif op == "SelectiveStateUpdate":
        feeds = dict(make_step(batch=3, n_cache=5), state_index=torch.tensor([4, -1, 0], dtype=torch.int32))
        names, t_in = STEP_INPUTS, {"x", "dt", "B", "C", "z"}
    else:
        c = make_conv(**kw)
        if case == "conv-cu-f16":
            c["cu_seqlens"] = torch.tensor([0, 10, 37])
        feeds = c if op == "CausalConv1d" else dict(state=torch.randn(4, 24, 5), x=c["x"][:, :, 0], weight=c["weight"],
                                                    bias=c["bias"], state_index=torch.tensor([3, 1], dtype=torch.int32))
        names, t_in = (CONV_INPUTS if op == "CausalConv1d" else CONV_UPDATE_INPUTS), {"x", "init_state", "state"}
    t_out = {"y"} | ({"final_state", "state_out"} if op.startswith("Causal") else set())
    no_state = 0 in attrs.values()
    ranks = {outs[0]: 2 if op.endswith("Update") else 3, outs[1]: 1 if no_state else 3}
    model = one_node_model(op, names, feeds, t_in, T, outs, t_out, attrs, ranks=ranks)
    got = session(model).run(None, feed_dict(feeds))
    inferred = _inferred(model)
    for name, value in zip(outs, got):
        node_out = name + "_t" if name in t_out and T != torch.float32 else name  # the node's own output
        elem, dims = inferred[node_out]
        want_elem = TensorProto.FLOAT if name not in t_out else ONNX_TYPE[T]  # the scan's and step's states: float
        assert elem == want_elem, (name, elem, want_elem)
        assert dims == list(value.shape), (name, dims, value.shape)


def test_inferred_shapes_keep_symbolic_dims(schemas_infer):
    vi, F = helper.make_tensor_value_info, TensorProto.FLOAT
    got = _infer_node("SelectiveScan", [vi("u", F, ["b", 8, "L"]), vi("delta", F, ["b", 8, "L"]), vi("A", F, [8, "N"]),
                                        vi("B", F, ["b", "N", "L"]), vi("C", F, None)],
                      ["u", "delta", "A", "B", "C"], ["y", "s"])
    assert got["y"] == (F, ["b", 8, "L"]) and got["s"] == (F, ["b", 8, "N"])


def test_session_options_register_the_library_once():
    so = sonnx.session_options(sonnx.session_options())
    assert sonnx.session_options(so) is so
    x = make_scan(batch=2)
    model = one_node_model("SelectiveScan", SCAN_INPUTS, x, {"u", "delta", "z"}, torch.float32, ["y"], {"y"}, {})
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(model.SerializeToString(), so)
    y = sess.run(None, feed_dict(x))[0]
    assert y.shape == tuple(x["u"].shape)
    # ONNX Runtime's copy of a session's options holds no registration: registered again
    again = ort.InferenceSession(model.SerializeToString(), sonnx.session_options(sess.get_session_options()))
    assert np.array_equal(again.run(None, feed_dict(x))[0], y)


def test_an_input_of_another_type_named_by_the_checker():
    # ONNX Runtime refuses it at load without naming it ("no kernel def matches node inputs"); the schemas do
    sonnx.register_schemas()
    x = make_scan(batch=2)
    model = one_node_model("SelectiveScan", SCAN_INPUTS, x, {"u", "z"}, torch.float16, ["y"], {"y"}, {})
    with pytest.raises(Exception, match="delta has inconsistent type tensor\\(float\\)"):
        onnx.checker.check_model(model, full_check=True)
    with pytest.raises(Exception):  # (ONNX Runtime 1.32's words: "no kernel def matches node inputs")
        session(model)


def test_inferred_shapes_left_unknown_where_an_input_has_another_rank(schemas_infer):
    vi, F = helper.make_tensor_value_info, TensorProto.FLOAT
    got = _infer_node("SelectiveScan", [vi("u", F, [8, 5]), vi("delta", F, [8, 5]), vi("A", F, [8, 4]), vi("B", F, [4]),
                                        vi("C", F, [4])], ["u", "delta", "A", "B", "C"], ["y", "s"])
    assert got["y"] == (F, None) and got["s"] == (F, None)  # a rank-2 u (the op refuses it): types only


def test_inferred_shapes_left_unknown_where_the_op_refuses(schemas_infer):
    vi, F, infer = helper.make_tensor_value_info, TensorProto.FLOAT, _infer_node

    scan_in = [vi("u", F, [1, 8, 5]), vi("delta", F, [1, 8, 5]), vi("A", F, [8, 4]), vi("B", F, [1, 4, 5]),
               vi("C", F, [1, 4, 5])]
    for n in (0, 1):  # cu_seqlens without a sequence
        got = infer("SelectiveScan", scan_in + [vi("cu", TensorProto.INT64, [n])], ["u", "delta", "A", "B", "C", "",
                    "", "", "", "cu"], ["y", "s"])
        assert got["s"][0] == F and _unknown(got["s"][1][0]) and got["s"][1][1:] == [8, 4], got
    assert infer("SelectiveScan", scan_in, ["u", "delta", "A", "B", "C"], ["y", "s"], return_last_state=2)["s"] == (F, None)
    for width in (1, 5):
        got = infer("CausalConv1d", [vi("x", F, [2, 8, 5]), vi("w", F, [8, width])], ["x", "w"], ["y", "f"])
        assert got["f"][0] == F and got["f"][1][:2] == [2, 8] and _unknown(got["f"][1][2]), got
    got = infer("SelectiveStateUpdate", [vi("state", F, [3, 8, 4]), vi("x", F, [3, 8, 1]), vi("dt", F, [3, 8]),
                                         vi("A", F, [8, 4]), vi("B", F, [3, 1, 4]), vi("C", F, [3, 1, 4])],
                ["state", "x", "dt", "A", "B", "C"], ["y", "so"])
    assert got["y"] == (F, None) and got["so"] == (F, [3, 8, 4]), got
    got = infer("CausalConv1dUpdate", [vi("state", F, [3, 8, 3]), vi("x", F, [3, 8, 2, 1]), vi("w", F, [8, 4])],
                ["state", "x", "w"], ["y", "so"])
    assert got["y"] == (F, None), got
