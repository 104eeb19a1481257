"""The launch schedule of an update function after ``latch-form-kernels`` (stage 'kernels' →
'artifact').

:func:`extract_launch_schedule` reads the host function — which after
``latch-wrap-host-compute`` + ``latch-form-kernels`` holds only constants, allocations, views,
``gpu.launch_func`` and the return — and turns it into plain data that the runtime executes
without MLIR (the ``launches`` / ``copies`` / layout part of the artifact manifest).

Where buffers live (a *location*, one JSON object):

* ``{"state": i}``   the i-th persistent state buffer (function argument i < #states);
* ``{"input": i}``   the i-th step input (the arguments after the states);
* ``{"output": i}``  the i-th step output (a pinned allocation returned after the states);
* ``{"arena": off}`` byte offset ``off`` in the one arena: planned temporaries
  (``latch.offset``), plus one unshared slot, appended after the planned part, for every
  other allocation (pinned buffers that hold a new state value or escape through a store).

Kernel arguments, in order, use the bare-pointer calling convention
(``kernel-bare-ptr-calling-convention``): a memref argument is one device pointer (a
location, ``"type": "ptr"``), the *base* pointer of the view: the kernel adds the static
``offset`` of its memref type itself (checked to stay inside the buffer); a scalar is ``{"const": value, "type": "i64"|"i32"|"f32"|...}``
(``index`` is ``i64``).  New state values are copied into the state buffers after the last
launch (``copies``: ``{"src": location, "dst": {"state": i}, "bytes": n}``), so kernels always
read the old state and write the new one elsewhere; a step is replayable as one CUDA graph.
Each launch lists the earlier launches it must follow (``after``: for a byte it reads, the
last earlier launch that may have written it; for a byte it may write, that one and the
launches that read it since; passes/launch_dependencies.py), so that the runtime may run the
others concurrently, and the byte ranges it can address (``touches``: ``[space, first byte,
end byte, may write]``, ``space`` one of ``"arena"``, ``"state i"``, ``"input i"``,
``"output i"``), from which the runtime orders the launches of two updates in one graph
(latch.runtime.pipelined); programs with collectives keep the plain order (neither).

A buffer-form ``latch.all_reduce`` (data-parallel programs) becomes an entry of
``collectives``: ``{"op": "all_reduce", "reduction", "bucket", "buffer": location, "dtype",
"count", "bytes", "after_launch": k, "wait_before_launch": j}``: the runtime starts it after
the first k launches and makes the program wait for it before launch j, the first later
launch whose buffer arguments can address the bucket's bytes (so the launches in between
overlap the reduction).

Anything the schedule cannot express raises :class:`latch.errors.LatchError`: dynamic shapes,
non-constant grid/block sizes or scalar arguments, host loops or any other host op, async
launches.
"""
from __future__ import annotations

import math

from latch.errors import LatchError, PassError
from latch.passes.base import operation as _op
from latch.passes.nonfinite_checks import CHECKED_ATTR, FLAG_ATTR

_GRID_LIMITS = (2**31 - 1, 65535, 65535)

_VIEW_OPS = {"memref.cast", "memref.collapse_shape", "memref.expand_shape",
             "memref.reinterpret_cast", "memref.view", "memref.subview"}
_IGNORED = {"memref.dealloc", "arith.constant", "index.constant", "memref.alloc",
            "memref.alloca", "func.return"}
ALIGNMENT = 256


def dtype_name(t) -> str:
    s = str(t)
    if s == "index":
        return "i64"
    if s in ("f16", "bf16", "f32", "f64", "i1", "i8", "i16", "i32", "i64"):
        return s
    raise LatchError(f"element type {s} is not supported by the cuda target")


_BYTES = {"f16": 2, "bf16": 2, "f32": 4, "f64": 8, "i1": 1, "i8": 1, "i16": 2, "i32": 4,
          "i64": 8}


def dtype_bytes(name: str) -> int:
    return _BYTES[name]


def _memref_layout(t, what: str) -> dict:
    from mlir import ir

    mt = ir.MemRefType(t)
    if not mt.has_static_shape:
        raise LatchError(f"{what}: dynamic shape {t} cannot be scheduled (the cuda target "
                         "needs static shapes)")
    strides, offset = mt.get_strides_and_offset()
    expect, acc = [], 1
    for d in reversed(mt.shape):
        expect.insert(0, acc)
        acc *= d
    if offset != 0 or any(s != e for s, e, d in zip(strides, expect, mt.shape) if d != 1):
        raise LatchError(f"{what}: non-contiguous layout {t} is not supported")
    dtype = dtype_name(mt.element_type)
    n = 1
    for d in mt.shape:
        n *= d
    return {"shape": list(mt.shape), "dtype": dtype, "bytes": n * dtype_bytes(dtype)}


def _align(x: int, a: int = ALIGNMENT) -> int:
    return (x + a - 1) // a * a


def find_entry(module, entry: str | None = None):
    funcs = [_op(o) for o in module.regions[0].blocks[0].operations
             if _op(o).name == "func.func" and _op(o).regions[0].blocks]
    if entry is not None:
        for f in funcs:
            if f.attributes["sym_name"].value == entry:
                return f
        raise LatchError(f"no function @{entry} in the module")
    with_abi = [f for f in funcs if "latch.abi" in f.attributes]
    if len(with_abi) == 1:
        return with_abi[0]
    if len(funcs) == 1:
        return funcs[0]
    raise LatchError("cannot tell the update function apart; pass entry=")


def _abi(func_op, n_args: int, n_results: int) -> tuple[list[dict], int]:
    """(states [{name, kind}], number of inputs)."""
    from mlir import ir

    if "latch.abi" not in func_op.attributes:
        # a plain function: everything is an input, everything returned is an output
        return [], n_args
    abi = ir.DictAttr(func_op.attributes["latch.abi"])
    states = []
    for s in ir.ArrayAttr(abi["states"]):
        d = ir.DictAttr(s)
        states.append({"name": ir.StringAttr(d["name"]).value,
                       "kind": ir.StringAttr(d["kind"]).value})
        if "of" in d:               # a parameter's rounded copy (latch-carry-casts)
            states[-1]["of"] = ir.StringAttr(d["of"]).value
    num_inputs = ir.IntegerAttr(abi["num_inputs"]).value
    if len(states) + num_inputs != n_args:
        raise LatchError(f"latch.abi says {len(states)} states + {num_inputs} inputs, the "
                         f"function has {n_args} arguments")
    return states, num_inputs


def _const_value(op):
    from mlir import ir

    attr = op.attributes["value"]
    t = str(op.results[0].type)
    if isinstance(attr, ir.FloatAttr) or t.startswith(("f", "bf")):
        return float(ir.FloatAttr(attr).value), dtype_name(op.results[0].type)
    if t == "i1":
        return int(ir.BoolAttr(attr).value) if isinstance(attr, ir.BoolAttr) else \
            int(ir.IntegerAttr(attr).value) & 1, "i1"
    return int(ir.IntegerAttr(attr).value), dtype_name(op.results[0].type)


def _first_branch(func_op):
    """The first op of ``func_op``'s body, in block order, that transfers control to another
    block (a ``cf.br``/``cf.cond_br``/... terminator), or None."""
    for block in func_op.regions[0].blocks:
        ops = [_op(o) for o in block.operations]
        if ops and len(ops[-1].successors) > 0:
            return ops[-1]
    return None


def extract_launch_schedule(module, entry: str | None = None) -> dict:
    """The launch schedule of ``entry`` (default: the function with ``latch.abi``)."""
    from mlir import ir

    module = _op(module)
    func_op = find_entry(module, entry)
    name = func_op.attributes["sym_name"].value
    block = func_op.regions[0].blocks[0]
    if len(func_op.regions[0].blocks) != 1:
        first = _first_branch(func_op)
        where = f": '{first.name}' at {first.location}" if first is not None else ""
        raise PassError(f"@{name}: the host function has control flow (host loops or "
                        f"branches){where}; the launch schedule cannot express it",
                        first.location if first is not None else None)
    ftype = ir.FunctionType(ir.TypeAttr(func_op.attributes["function_type"]).value)
    args, results = list(ftype.inputs), list(ftype.results)
    states, num_inputs = _abi(func_op, len(args), len(results))
    S = len(states)

    arg_layouts = []
    for i, t in enumerate(args):
        if not isinstance(t, ir.MemRefType):
            raise LatchError(f"@{name}: argument {i} has type {t}; the cuda target passes "
                             "every argument as a buffer")
        arg_layouts.append(_memref_layout(t, f"@{name} argument {i}"))
    for s, lay in zip(states, arg_layouts[:S]):
        s.update(lay)
    inputs = arg_layouts[S:]
    outputs = []
    for i, t in enumerate(results[S:]):
        if not isinstance(t, ir.MemRefType):
            raise LatchError(f"@{name}: result {S + i} has type {t}, not a buffer")
        outputs.append(_memref_layout(t, f"@{name} result {S + i}"))

    ops = [_op(o) for o in block.operations]
    ret = ops[-1]
    if ret.name != "func.return":
        raise LatchError(f"@{name}: the body does not end in func.return")
    returned = list(ret.operands)

    # -- locations of buffers -------------------------------------------------------------
    loc: dict = {}            # value (hashable by identity) -> location dict
    planned = int(ir.IntegerAttr(func_op.attributes["latch.arena_bytes"]).value) \
        if "latch.arena_bytes" in func_op.attributes else 0
    extra = _align(planned)

    def key(v):
        return v   # mlir.ir.Value hashes by the underlying value

    # value -> (bytes of the buffer it is a view of, byte offset of its first element in it)
    span: dict = {}
    for i, a in enumerate(block.arguments):
        loc[key(a)] = {"state": i} if i < S else {"input": i - S}
        span[key(a)] = (arg_layouts[i]["bytes"], 0)

    # returned pinned allocations that are outputs live in the output buffers
    output_of: dict = {}
    for p, v in enumerate(returned[S:]):
        if _is_alloc(v) and key(v) not in output_of:
            output_of[key(v)] = p

    consts: dict = {}
    launches = []
    touched = []          # per launch: the byte ranges its buffer arguments can address
    touched_args = []     # per launch: the kernel argument number of each of those ranges
    touched_lanes = []    # per launch: each range's strided rows (_lanes) or None
    collectives = []
    arena_seen = False
    flag = None           # latch-nonfinite-checks' flag: its writes commute (no ordering)
    for op in ops[:-1]:
        n = op.name
        if n in ("arith.constant", "index.constant"):
            consts[key(op.results[0])] = _const_value(op)
        elif n in ("memref.alloc", "memref.alloca"):
            v = op.results[0]
            lay = _memref_layout(v.type, f"@{name}: {n}")
            span[key(v)] = (lay["bytes"], 0)
            if key(v) in output_of:
                loc[key(v)] = {"output": output_of[key(v)]}
            elif "latch.offset" in op.attributes:
                loc[key(v)] = {"arena": int(ir.IntegerAttr(op.attributes["latch.offset"]).value)}
            elif not arena_seen and _is_materialized_arena(v, planned):
                # latch-plan-memory{materialize=true}: the planned buffers are memref.view
                # slices of this one allocation, which is the arena itself
                arena_seen = True
                loc[key(v)] = {"arena": 0}
            else:
                loc[key(v)] = {"arena": extra}
                extra = _align(extra + lay["bytes"])
            if FLAG_ATTR in op.attributes:
                flag = v
        elif n in _VIEW_OPS:
            src = op.operands[0]
            if key(src) not in loc:
                raise LatchError(f"@{name}: '{n}' of a buffer the schedule does not know")
            base = dict(loc[key(src)])
            shift = _view_shift(op, consts)
            if shift:
                base["byte_offset"] = base.get("byte_offset", 0) + shift
                if "arena" in base:
                    base["arena"] += base.pop("byte_offset")
            loc[key(op.results[0])] = base
            root_bytes, start = span.get(key(src), (None, 0))
            span[key(op.results[0])] = (root_bytes, start + shift)
        elif n == "memref.dealloc":
            continue
        elif n == "gpu.launch_func":
            launch, ranges, arg_numbers, lanes = _launch(op, consts, loc, span, name, flag)
            launches.append(launch)
            touched.append(ranges)
            touched_args.append(arg_numbers)
            touched_lanes.append(lanes)
        elif n == "latch.all_reduce" and len(op.operands) == 1 and not len(op.results):
            collectives.append(_collective(op, loc, len(launches), name))
        else:
            raise LatchError(
                f"@{name}: host op '{n}' cannot be part of a launch schedule (only constants, "
                "allocations, views and gpu.launch_func may stay on the host; run "
                "latch-wrap-host-compute before latch-form-kernels)")

    # -- results: new state values are copied into the state buffers after the launches ----
    copies = []
    for p, v in enumerate(returned):
        if key(v) not in loc:
            raise LatchError(f"@{name}: result {p} is not a buffer the schedule knows")
        src = loc[key(v)]
        dst = {"state": p} if p < S else {"output": p - S}
        if src == dst:
            continue
        nbytes = (states[p] if p < S else outputs[p - S])["bytes"]
        copies.append({"src": src, "dst": dst, "bytes": nbytes})
        if p < S and _is_alloc(v) and CHECKED_ATTR in _op(v.owner).attributes:
            copies[-1]["checked_in_kernels"] = True
    dst_states = {c["dst"]["state"] for c in copies if "state" in c["dst"]}
    for c in copies:
        if "state" in c["src"] and c["src"]["state"] in dst_states:
            raise LatchError(f"@{name}: a new state value is another state's old buffer "
                             "(a permutation of states); not supported by the cuda target")

    for c in collectives:
        c["wait_before_launch"] = _first_toucher(c, touched)
    if not collectives:     # a data-parallel program keeps one stream (its reductions' waits)
        from latch.passes.launch_dependencies import written_arguments
        from latch.runtime.dependencies import launch_dependencies
        kernels = _kernel_functions(module)
        written: dict = {}
        accesses = []
        for launch, ranges, arg_numbers, lanes in zip(launches, touched, touched_args,
                                                      touched_lanes):
            key_ = (launch["module"], launch["kernel"])
            if key_ not in written:
                fn = kernels.get(key_)
                written[key_] = written_arguments(fn) if fn is not None else None
            w = written[key_]
            accesses.append([r + (w is None or w[a],) + ((ln,) if ln else ())
                             for r, a, ln in zip(ranges, arg_numbers, lanes)])
        for launch, after, ranges in zip(launches, launch_dependencies(accesses), accesses):
            launch["after"] = after
            launch["touches"] = [list(r[:4]) + ([list(r[4])] if len(r) > 4 else [])
                                 for r in ranges]

    schedule = {"entry": name, "arena_bytes": extra, "planned_arena_bytes": planned,
                "alignment": ALIGNMENT,
                "states": states, "inputs": inputs, "outputs": outputs,
                "launches": launches, "copies": copies, "collectives": collectives}
    if flag is not None:
        schedule["nonfinite_flag"] = loc[key(flag)]
    return schedule


def _collective(op, loc, issued_after: int, fname: str) -> dict:
    """A buffer-form ``latch.all_reduce``: which buffer, how many elements, and where in the
    launch list it starts (after the first ``after_launch`` launches)."""
    from mlir import ir

    bucket = op.operands[0]
    if bucket not in loc:
        raise LatchError(f"@{fname}: latch.all_reduce of a buffer the schedule does not know")
    where = dict(loc[bucket])
    if "arena" not in where:
        raise LatchError(f"@{fname}: latch.all_reduce of a buffer outside the arena ({where})")
    lay = _memref_layout(bucket.type, f"@{fname}: latch.all_reduce")
    return {"op": "all_reduce",
            "reduction": ir.StringAttr(op.attributes["reduction"]).value,
            "bucket": int(ir.IntegerAttr(op.attributes["bucket"]).value),
            "buffer": where, "dtype": lay["dtype"], "count": lay["shape"][0],
            "bytes": lay["bytes"], "after_launch": issued_after}


def _first_toucher(c: dict, touched: list) -> int:
    """The index of the first launch after the collective starts that may read or write its
    buffer (the runtime makes the program wait for the reduction there); the number of
    launches if none does."""
    start = c["buffer"]["arena"]
    end = start + c["bytes"]
    for i in range(c["after_launch"], len(touched)):
        if any(space == "arena" and lo < end and start < hi for space, lo, hi in touched[i]):
            return i
    return len(touched)


def _is_materialized_arena(v, planned: int) -> bool:
    from mlir import ir

    t = ir.MemRefType(v.type)
    if t.rank != 1 or str(t.element_type) != "i8" or t.shape[0] != max(planned, 1):
        return False
    return all(_op(u.owner).name in ("memref.view", "memref.dealloc") for u in v.uses)


def _is_alloc(v) -> bool:
    owner = v.owner
    return not hasattr(owner, "arguments") and _op(owner).name in ("memref.alloc",
                                                                  "memref.alloca")


def _view_shift(op, consts) -> int:
    """Byte offset a view adds to its source (0 for casts and reshapes)."""
    from mlir import ir

    n = op.name
    if n in ("memref.cast", "memref.collapse_shape", "memref.expand_shape"):
        return 0
    if n == "memref.view":
        shift = op.operands[1]
        if shift not in consts:
            raise LatchError("memref.view with a non-constant byte shift")
        return int(consts[shift][0])
    t = ir.MemRefType(op.results[0].type)
    strides, offset = t.get_strides_and_offset()
    if offset < 0 or offset > (1 << 62):
        raise LatchError(f"'{n}' with a dynamic offset cannot be scheduled")
    src = ir.MemRefType(op.operands[0].type)
    _, src_offset = src.get_strides_and_offset()
    return (offset - src_offset) * dtype_bytes(dtype_name(t.element_type))


def _launch(op, consts, loc, span, fname, unordered=None) -> dict:
    """(the launch's manifest entry, the byte ranges of its buffer arguments, their argument
    numbers, their strided rows: :func:`_lanes`); ``unordered``: a buffer whose ranges are left out (latch-nonfinite-checks'
    flag: every write stores the same 0, so launches need no order for it)."""
    from mlir import ir

    view = op.opview
    if len(view.asyncDependencies) or view.asyncToken is not None:
        raise LatchError(f"@{fname}: async gpu.launch_func is not supported by the schedule")

    def const_int(v, what):
        if v not in consts:
            raise LatchError(f"@{fname}: the {what} of a launch is not a constant")
        return int(consts[v][0])

    grid = [const_int(v, "grid size") for v in (view.gridSizeX, view.gridSizeY, view.gridSizeZ)]
    block = [const_int(v, "block size")
             for v in (view.blockSizeX, view.blockSizeY, view.blockSizeZ)]
    for c in (view.clusterSizeX, view.clusterSizeY, view.clusterSizeZ):
        if c is not None:
            raise LatchError(f"@{fname}: thread-block clusters are not supported yet")
    shared = view.dynamicSharedMemorySize
    shared_bytes = const_int(shared, "dynamic shared memory size") if shared is not None else 0
    kernel = ir.SymbolRefAttr(op.attributes["kernel"])
    mod, fn = kernel.value[0], kernel.value[-1]
    limits = (_GRID_LIMITS, "grid", grid), ((1024, 1024, 64), "block", block)
    for most, what, dims in limits:
        if any(not 1 <= d <= m for d, m in zip(dims, most)) or \
                (what == "block" and math.prod(dims) > 1024):
            raise LatchError(f"@{fname}: kernel {mod}::{fn} is launched with {what} {dims}, "
                             f"beyond what CUDA allows (grid ≤ {list(_GRID_LIMITS)}, block ≤ "
                             "[1024, 1024, 64] and 1024 threads); the kernel former that made "
                             "it must tile differently")
    args, ranges, arg_numbers, lanes = [], [], [], []
    for i, v in enumerate(view.kernelOperands):
        if isinstance(v.type, ir.MemRefType):
            if v not in loc:
                raise LatchError(f"@{fname}: argument {i} of kernel {mod}::{fn} is a buffer "
                                 "the schedule does not know")
            a = _base_pointer(dict(loc[v]), v.type, span.get(v, (None, 0)),
                              f"@{fname}: argument {i} of kernel {mod}::{fn}")
            if unordered is None or v != unordered:
                ranges.append(_addressed(a, v.type))
                arg_numbers.append(i)
                lanes.append(_lanes(v.type, ranges[-1][1]))
            a["type"] = "ptr"
            args.append(a)
        elif v in consts:
            value, t = consts[v]
            args.append({"const": value, "type": t})
        else:
            raise LatchError(f"@{fname}: argument {i} ({v.type}) of kernel {mod}::{fn} is "
                             "computed on the host at run time; the schedule needs constants")
    # the bytes its buffer arguments span: a streaming kernel's traffic when each is read or
    # written once (what gpu_profile_launches divides by the time for a kernel's bandwidth)
    arg_bytes = sum(hi - lo for _, lo, hi in ranges)
    return {"module": mod, "kernel": fn, "grid": grid, "block": block,
            "shared_bytes": shared_bytes, "args": args, "arg_bytes": arg_bytes}, \
        ranges, arg_numbers, lanes


def _kernel_functions(module) -> dict:
    """(gpu.module name, gpu.func name) -> the kernel function, for every kernel of
    ``module``."""
    out = {}
    for op in module.regions[0].blocks[0].operations:
        op = _op(op)
        if op.name != "gpu.module":
            continue
        mod = op.attributes["sym_name"].value
        for inner in op.regions[0].blocks[0].operations:
            inner = _op(inner)
            if inner.name == "gpu.func":
                out[(mod, inner.attributes["sym_name"].value)] = inner
    return out


def _addressed(a: dict, t) -> tuple[str, int, int]:
    """(space, first byte, end byte) a memref argument with base pointer location ``a`` can
    address; space is "arena" (offsets in the arena) or the name of another buffer."""
    from mlir import ir

    mt = ir.MemRefType(t)
    strides, offset = mt.get_strides_and_offset()
    eb = dtype_bytes(dtype_name(mt.element_type))
    if "arena" in a:
        space, base = "arena", a["arena"]
    else:
        space = next(k for k in ("state", "input", "output") if k in a)
        space, base = f"{space} {a[space]}", a.get("byte_offset", 0)
    if any(d == 0 for d in mt.shape):
        return space, base, base
    lo = offset + sum((d - 1) * s for d, s in zip(mt.shape, strides) if s < 0)
    hi = offset + sum((d - 1) * s for d, s in zip(mt.shape, strides) if s > 0)
    return space, base + lo * eb, base + (hi + 1) * eb


#: whether a strided view's range carries its rows (:func:`_lanes`), so that launches
#: writing different parts of one row are not ordered; off until timed on the GPU (the
#: build switch ``-sideparts`` of bench/tinymoe196m_build.py turns it on: the artifact is
#: otherwise byte for byte the same)
STRIDED_ROWS = False


def _lanes(t, first_byte: int) -> tuple | None:
    """(period, first, width) in bytes when a memref argument of type ``t`` whose first
    byte is ``first_byte`` of its space (:func:`_addressed`) addresses rows of ``width``
    contiguous bytes ``period`` bytes apart with a gap between them — a strided view such
    as the query part of a fused ``[tokens, 3, heads, dim]`` buffer — ``first`` that byte
    modulo ``period`` (latch.runtime.dependencies); None otherwise."""
    from mlir import ir

    if not STRIDED_ROWS:
        return None
    mt = ir.MemRefType(t)
    strides, _ = mt.get_strides_and_offset()
    dims = sorted((s, d) for d, s in zip(mt.shape, strides) if d != 1)
    if not dims or any(s <= 0 for s, _ in dims):
        return None
    inner = 1                                  # contiguous elements at the innermost dims
    while dims and dims[0][0] == inner:
        inner *= dims.pop(0)[1]
    if not dims:
        return None
    period, count = dims[0][0], 1
    for s, d in dims:                          # the rest: one uniform row pitch
        if s != period * count:
            return None
        count *= d
    if period <= inner:
        return None
    eb = dtype_bytes(dtype_name(mt.element_type))
    return period * eb, first_byte % (period * eb), inner * eb


def _base_pointer(a: dict, t, span, what: str) -> dict:
    """The location of the *base* pointer of a memref kernel argument.  Under the bare-pointer
    calling convention the kernel rebuilds its descriptor from the pointer and the static
    layout of its type (``MemRefDescriptor::fromStaticShape``): it indexes ``ptr + offset +
    sum(i_k * stride_k)`` with the type's static ``offset``.  ``loc`` of a view (a subview,
    or a reshape of one, with ``offset: N`` in its type) is the address of its first
    element, which already includes that offset; pass the base (``loc - offset``) so that
    the offset is applied once.  Also checks that every element the type can address lies
    inside the buffer the view comes from (``span``: (its bytes, the view's byte offset)) and
    that the base is aligned to its element (buffers themselves are at least 256-byte
    aligned), which every kernel's loads and stores assume."""
    from mlir import ir

    mt = ir.MemRefType(t)
    strides, offset = mt.get_strides_and_offset()
    eb = dtype_bytes(dtype_name(mt.element_type))
    shift = offset * eb
    if shift:
        if "arena" in a:
            a["arena"] -= shift
        else:
            a["byte_offset"] = a.get("byte_offset", 0) - shift
            if not a["byte_offset"]:
                del a["byte_offset"]
    at = a["arena"] if "arena" in a else a.get("byte_offset", 0)
    if at % eb:          # loads and stores of an element assume its natural alignment
        raise LatchError(f"{what}: {t} would start at byte {at} of its buffer, not a multiple "
                         f"of its {eb}-byte elements (the kernels load and store each element "
                         f"with one aligned access: latch-nvptx-data-layout)")
    root_bytes, start = span
    if root_bytes is not None and all(d > 0 for d in mt.shape):
        base = start - shift
        last = offset + sum((d - 1) * s for d, s in zip(mt.shape, strides))
        if base < 0 or base + (last + 1) * eb > max(root_bytes, 0) or \
                ("arena" in a and a["arena"] < 0):
            raise LatchError(f"{what}: {t} addresses bytes [{base}, {base + (last + 1) * eb}) "
                             f"of a buffer of {root_bytes} bytes")
    return a
