"""The non-finite guard of a cuda update: hand-written PTX kernels + their tables.

A step of a :class:`latch.runtime.program.CudaProgram` computes every new state value into
an arena slot; the guard decides on the device, inside the CUDA graph, whether those values
are committed into the state buffers:

1. ``cuMemsetD32Async(flag, 1)``                                  (a memset node)
2. the update's kernels                                          (unchanged)
3. ``latch_check_finite(check_table, flag)``: one launch; block row ``y`` scans table entry
   ``y`` (a new floating-point state value or the loss: pointer, element count, exponent
   mask, element width 2/4/8 bytes) and clears the flag if any element has an all-ones
   exponent (NaN or +-inf of f16, bf16, f32 or f64).  Integer states (counters) are not
   checked.
4. the outputs (the loss) are copied unconditionally;
5. ``latch_guarded_copy(copy_table, flag)``: one launch; block row ``y`` copies entry ``y``
   (src, dst, bytes) only when the flag is still set (the states that do not commit by
   swap, :mod:`latch.runtime.commit`, and a swapping state that this variant writes from
   elsewhere, into its other buffer; a swapping state is committed by the host moving it to
   its other buffer after it reads the flag).  So the graph is static, and a step
   whose loss or new state is non-finite leaves every state buffer, the step counter
   included, bitwise unchanged.

Both kernels are deterministic: the flag only depends on whether some element is
non-finite (every writer stores the same 0), and each copied byte has one writer.
The host reads the flag together with the loss in one 16-byte device-to-host copy after
the graph (see ``CudaProgram.step``) and applies ``on_nonfinite``.

Table entries are 32 bytes, filled once when the program is loaded:

* check:  ``u64 ptr, u64 count (elements), u64 exponent mask, u32 width (bytes), u32 0``
* copy:   ``u64 src, u64 dst, u64 bytes, u64 0`` (16-byte vector copies when src, dst and
  bytes are multiples of 16, byte copies otherwise)
"""
from __future__ import annotations

import numpy as np

ENTRY_BYTES = 32
BLOCK = 256
MAX_BLOCKS_X = 128     # per table entry; the kernels loop with a grid stride

# element width (bytes) and exponent mask of each floating-point dtype
FLOAT_CHECKS = {"f16": (2, 0x7C00), "bf16": (2, 0x7F80), "f32": (4, 0x7F800000),
                "f64": (8, 0x7FF0000000000000)}

PTX = r"""
.version 7.0
.target sm_52
.address_size 64

// latch_check_finite(table, flag): entry ctaid.y = {u64 ptr, u64 n, u64 mask, u32 width};
// clears the u32 at flag if some element e has (e & mask) == mask (NaN or inf).
.visible .entry latch_check_finite(
    .param .u64 latch_check_finite_param_0,
    .param .u64 latch_check_finite_param_1
)
{
    .reg .pred  %p<8>;
    .reg .b32   %r<16>;
    .reg .b64   %rd<24>;
    .reg .b16   %h<2>;

    ld.param.u64        %rd1, [latch_check_finite_param_0];
    ld.param.u64        %rd2, [latch_check_finite_param_1];
    cvta.to.global.u64  %rd1, %rd1;
    cvta.to.global.u64  %rd2, %rd2;
    mov.u32             %r1, %ctaid.y;
    mul.wide.u32        %rd3, %r1, 32;
    add.s64             %rd3, %rd1, %rd3;
    ld.global.u64       %rd4, [%rd3];
    ld.global.u64       %rd5, [%rd3+8];
    ld.global.u64       %rd6, [%rd3+16];
    ld.global.u32       %r2, [%rd3+24];
    cvta.to.global.u64  %rd4, %rd4;
    mov.u32             %r3, %ctaid.x;
    mov.u32             %r4, %ntid.x;
    mov.u32             %r5, %tid.x;
    mov.u32             %r6, %nctaid.x;
    mul.wide.u32        %rd7, %r3, %r4;
    cvt.u64.u32         %rd8, %r5;
    add.s64             %rd7, %rd7, %rd8;
    mul.wide.u32        %rd9, %r6, %r4;
    mov.u32             %r7, 0;
$Lcheck_loop:
    setp.ge.u64         %p1, %rd7, %rd5;
    @%p1 bra            $Lcheck_done;
    setp.eq.u32         %p2, %r2, 2;
    @%p2 bra            $Lcheck_w2;
    setp.eq.u32         %p3, %r2, 4;
    @%p3 bra            $Lcheck_w4;
    shl.b64             %rd10, %rd7, 3;
    add.s64             %rd10, %rd4, %rd10;
    ld.global.u64       %rd11, [%rd10];
    bra.uni             $Lcheck_test;
$Lcheck_w4:
    shl.b64             %rd10, %rd7, 2;
    add.s64             %rd10, %rd4, %rd10;
    ld.global.u32       %r8, [%rd10];
    cvt.u64.u32         %rd11, %r8;
    bra.uni             $Lcheck_test;
$Lcheck_w2:
    shl.b64             %rd10, %rd7, 1;
    add.s64             %rd10, %rd4, %rd10;
    ld.global.u16       %h1, [%rd10];
    cvt.u64.u16         %rd11, %h1;
$Lcheck_test:
    and.b64             %rd12, %rd11, %rd6;
    setp.eq.u64         %p4, %rd12, %rd6;
    selp.u32            %r9, 1, 0, %p4;
    or.b32              %r7, %r7, %r9;
    add.s64             %rd7, %rd7, %rd9;
    bra.uni             $Lcheck_loop;
$Lcheck_done:
    setp.eq.u32         %p5, %r7, 0;
    @%p5 bra            $Lcheck_end;
    mov.u32             %r10, 0;
    st.global.u32       [%rd2], %r10;
$Lcheck_end:
    ret;
}

// latch_guarded_copy(table, flag): entry ctaid.y = {u64 src, u64 dst, u64 bytes}; copies
// only when the u32 at flag is non-zero.
.visible .entry latch_guarded_copy(
    .param .u64 latch_guarded_copy_param_0,
    .param .u64 latch_guarded_copy_param_1
)
{
    .reg .pred  %p<8>;
    .reg .b32   %r<16>;
    .reg .b64   %rd<24>;
    .reg .b16   %h<2>;

    ld.param.u64        %rd1, [latch_guarded_copy_param_0];
    ld.param.u64        %rd2, [latch_guarded_copy_param_1];
    cvta.to.global.u64  %rd1, %rd1;
    cvta.to.global.u64  %rd2, %rd2;
    ld.global.u32       %r1, [%rd2];
    setp.eq.u32         %p1, %r1, 0;
    @%p1 bra            $Lcopy_end;
    mov.u32             %r2, %ctaid.y;
    mul.wide.u32        %rd3, %r2, 32;
    add.s64             %rd3, %rd1, %rd3;
    ld.global.u64       %rd4, [%rd3];
    ld.global.u64       %rd5, [%rd3+8];
    ld.global.u64       %rd6, [%rd3+16];
    cvta.to.global.u64  %rd4, %rd4;
    cvta.to.global.u64  %rd5, %rd5;
    mov.u32             %r3, %ctaid.x;
    mov.u32             %r4, %ntid.x;
    mov.u32             %r5, %tid.x;
    mov.u32             %r6, %nctaid.x;
    mul.wide.u32        %rd7, %r3, %r4;
    cvt.u64.u32         %rd8, %r5;
    add.s64             %rd7, %rd7, %rd8;
    mul.wide.u32        %rd9, %r6, %r4;
    or.b64              %rd10, %rd4, %rd5;
    or.b64              %rd10, %rd10, %rd6;
    and.b64             %rd10, %rd10, 15;
    setp.ne.u64         %p2, %rd10, 0;
    @%p2 bra            $Lcopy_bytes;
    shr.u64             %rd11, %rd6, 4;
$Lcopy_v4_loop:
    setp.ge.u64         %p3, %rd7, %rd11;
    @%p3 bra            $Lcopy_end;
    shl.b64             %rd12, %rd7, 4;
    add.s64             %rd13, %rd4, %rd12;
    add.s64             %rd14, %rd5, %rd12;
    ld.global.v4.u32    {%r7, %r8, %r9, %r10}, [%rd13];
    st.global.v4.u32    [%rd14], {%r7, %r8, %r9, %r10};
    add.s64             %rd7, %rd7, %rd9;
    bra.uni             $Lcopy_v4_loop;
$Lcopy_bytes:
    setp.ge.u64         %p4, %rd7, %rd6;
    @%p4 bra            $Lcopy_end;
    add.s64             %rd13, %rd4, %rd7;
    add.s64             %rd14, %rd5, %rd7;
    ld.global.u8        %h1, [%rd13];
    st.global.u8        [%rd14], %h1;
    add.s64             %rd7, %rd7, %rd9;
    bra.uni             $Lcopy_bytes;
$Lcopy_end:
    ret;
}
"""


def plan(manifest: dict) -> tuple[list, list, str]:
    """What the guard of ``manifest`` checks and copies, as manifest locations:
    (checks [(location, dtype, element count)], copies [(src, dst, bytes)], on_nonfinite).
    Checks: every new floating-point state value that is copied into its state buffer and
    not already checked by the kernels that store it (``checked_in_kernels``:
    latch-nonfinite-checks, which clear the manifest's ``nonfinite_flag`` themselves), and
    the loss (output 0) when it is floating-point.  Copies: every new state value."""
    from latch.errors import LatchError

    policy = (manifest.get("options") or {}).get("on_nonfinite") or "skip"
    if policy not in ("skip", "raise"):
        raise LatchError(f"the artifact's on_nonfinite is {policy!r}; this runtime knows "
                         "'skip' and 'raise'")
    states, outputs = manifest["states"], manifest["outputs"]
    checks, copies = [], []
    loss_loc = {"output": 0} if outputs else None
    for c in manifest.get("copies", []):
        if c["dst"] == {"output": 0}:
            loss_loc = c["src"]
        if "state" not in c["dst"]:
            continue
        spec = states[int(c["dst"]["state"])]
        copies.append((c["src"], c["dst"], int(c["bytes"])))
        if spec["dtype"] in FLOAT_CHECKS and not c.get("checked_in_kernels"):
            checks.append((c["src"], spec["dtype"],
                           int(c["bytes"]) // FLOAT_CHECKS[spec["dtype"]][0]))
    if outputs and outputs[0]["dtype"] in FLOAT_CHECKS:
        checks.append((loss_loc, outputs[0]["dtype"],
                       int(outputs[0]["bytes"]) // FLOAT_CHECKS[outputs[0]["dtype"]][0]))
    return checks, copies, policy


def check_table(entries) -> np.ndarray:
    """``entries``: [(ptr, dtype name, element count)] -> the packed check table."""
    table = np.zeros((max(1, len(entries)), 4), dtype=np.uint64)
    for i, (ptr, dtype, count) in enumerate(entries):
        width, mask = FLOAT_CHECKS[dtype]
        table[i] = (ptr, count, mask, width)   # width in the low u32 of word 3
    return table


def copy_table(entries) -> np.ndarray:
    """``entries``: [(src, dst, bytes)] -> the packed guarded-copy table."""
    table = np.zeros((max(1, len(entries)), 4), dtype=np.uint64)
    for i, (src, dst, nbytes) in enumerate(entries):
        table[i] = (src, dst, nbytes, 0)
    return table


def grid_x(units: int) -> int:
    """Blocks per table entry for ``units`` work items (the kernels loop with a stride)."""
    return max(1, min(MAX_BLOCKS_X, -(-int(units) // BLOCK)))
