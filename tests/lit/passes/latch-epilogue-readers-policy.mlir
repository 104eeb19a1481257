// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-form-contraction-kernels{chip=sm_90a})' | FileCheck %s --check-prefix=LARGE
// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-form-contraction-kernels{chip=sm_90a epilogue-readers=all})' | FileCheck %s --check-prefix=ALL
// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-form-contraction-kernels{chip=sm_90a epilogue-readers=none})' | FileCheck %s --check-prefix=NONE
// RUN: not latch-opt %s --pass-pipeline='builtin.module(latch-form-contraction-kernels{epilogue-readers=some})' 2>&1 | FileCheck %s --check-prefix=BAD
// Which readers a product's epilogue takes (epilogue_readers.pays).  The default, "large":
// only a reader after which the product's own value is not stored, on a grid of at least
// four waves (528 blocks: 132 m-tiles x 4 n-tiles here) — the SwiGLU forward below with
// its up product read again later, or on a one-block grid, keeps its launch; "all" takes
// every reader that matches, "none" none.
// BAD: epilogue-readers=some is not one of large, all, none

#mA = affine_map<(m, n, k) -> (m, k)>
#mB = affine_map<(m, n, k) -> (n, k)>
#mC = affine_map<(m, n, k) -> (m, n)>
#id = affine_map<(m, n) -> (m, n)>

// 528 blocks, the product read by the SwiGLU alone: in its epilogue by default.
// LARGE-LABEL: func.func @large_unstored(
// LARGE: gpu.launch_func
// LARGE-NOT: linalg.generic
// LARGE: return
// ALL-LABEL: func.func @large_unstored(
// ALL: gpu.launch_func
// ALL-NOT: linalg.generic
// ALL: return
// NONE-LABEL: func.func @large_unstored(
// NONE: gpu.launch_func
// NONE-NEXT: linalg.generic
// NONE: math.exp
func.func @large_unstored(%x: memref<16896x64xbf16>, %w: memref<1024x64xbf16>,
    %gate: memref<16896x1024xbf16>, %h: memref<16896x1024xbf16>, %keep: memref<16896x1024xbf16>) {
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %p = memref.alloc() : memref<16896x1024xf32>
  linalg.generic {indexing_maps = [#id], iterator_types = ["parallel", "parallel"]}
      outs(%p : memref<16896x1024xf32>) {
  ^bb0(%o: f32):
    linalg.yield %zero : f32
  }
  linalg.generic {indexing_maps = [#mA, #mB, #mC], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<16896x64xbf16>, memref<1024x64xbf16>) outs(%p : memref<16896x1024xf32>) {
  ^bb0(%a: bf16, %b: bf16, %acc: f32):
    %ae = arith.extf %a : bf16 to f32
    %be = arith.extf %b : bf16 to f32
    %m = arith.mulf %ae, %be : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  %up = memref.alloc() : memref<16896x1024xbf16>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%p : memref<16896x1024xf32>) outs(%up : memref<16896x1024xbf16>) {
  ^bb0(%v: f32, %o: bf16):
    %r = arith.truncf %v : f32 to bf16
    linalg.yield %r : bf16
  }
  linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%gate, %up : memref<16896x1024xbf16>, memref<16896x1024xbf16>) outs(%h : memref<16896x1024xbf16>) {
  ^bb0(%g: bf16, %u: bf16, %o: bf16):
    %ge = arith.extf %g : bf16 to f32
    %n = arith.negf %ge : f32
    %e = math.exp %n : f32
    %d = arith.addf %e, %one : f32
    %sg = arith.divf %ge, %d : f32
    %sr = arith.truncf %sg : f32 to bf16
    %y = arith.mulf %sr, %u : bf16
    linalg.yield %y : bf16
  }
  return
}

// 528 blocks, the product read again after the SwiGLU (copied): apart by default.
// LARGE-LABEL: func.func @large_stored(
// LARGE: gpu.launch_func
// LARGE-NEXT: linalg.generic
// LARGE: math.exp
// ALL-LABEL: func.func @large_stored(
// ALL: gpu.launch_func
// ALL-NOT: linalg.generic
// ALL: return
// NONE-LABEL: func.func @large_stored(
// NONE: gpu.launch_func
// NONE-NEXT: linalg.generic
// NONE: math.exp
func.func @large_stored(%x: memref<16896x64xbf16>, %w: memref<1024x64xbf16>,
    %gate: memref<16896x1024xbf16>, %h: memref<16896x1024xbf16>, %keep: memref<16896x1024xbf16>) {
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %p = memref.alloc() : memref<16896x1024xf32>
  linalg.generic {indexing_maps = [#id], iterator_types = ["parallel", "parallel"]}
      outs(%p : memref<16896x1024xf32>) {
  ^bb0(%o: f32):
    linalg.yield %zero : f32
  }
  linalg.generic {indexing_maps = [#mA, #mB, #mC], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<16896x64xbf16>, memref<1024x64xbf16>) outs(%p : memref<16896x1024xf32>) {
  ^bb0(%a: bf16, %b: bf16, %acc: f32):
    %ae = arith.extf %a : bf16 to f32
    %be = arith.extf %b : bf16 to f32
    %m = arith.mulf %ae, %be : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  %up = memref.alloc() : memref<16896x1024xbf16>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%p : memref<16896x1024xf32>) outs(%up : memref<16896x1024xbf16>) {
  ^bb0(%v: f32, %o: bf16):
    %r = arith.truncf %v : f32 to bf16
    linalg.yield %r : bf16
  }
  linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%gate, %up : memref<16896x1024xbf16>, memref<16896x1024xbf16>) outs(%h : memref<16896x1024xbf16>) {
  ^bb0(%g: bf16, %u: bf16, %o: bf16):
    %ge = arith.extf %g : bf16 to f32
    %n = arith.negf %ge : f32
    %e = math.exp %n : f32
    %d = arith.addf %e, %one : f32
    %sg = arith.divf %ge, %d : f32
    %sr = arith.truncf %sg : f32 to bf16
    %y = arith.mulf %sr, %u : bf16
    linalg.yield %y : bf16
  }
  memref.copy %up, %keep : memref<16896x1024xbf16> to memref<16896x1024xbf16>
  return
}

// one block: apart by default.
// LARGE-LABEL: func.func @small_unstored(
// LARGE: gpu.launch_func
// LARGE-NEXT: linalg.generic
// LARGE: math.exp
// ALL-LABEL: func.func @small_unstored(
// ALL: gpu.launch_func
// ALL-NOT: linalg.generic
// ALL: return
// NONE-LABEL: func.func @small_unstored(
// NONE: gpu.launch_func
// NONE-NEXT: linalg.generic
// NONE: math.exp
func.func @small_unstored(%x: memref<128x64xbf16>, %w: memref<256x64xbf16>,
    %gate: memref<128x256xbf16>, %h: memref<128x256xbf16>, %keep: memref<128x256xbf16>) {
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %p = memref.alloc() : memref<128x256xf32>
  linalg.generic {indexing_maps = [#id], iterator_types = ["parallel", "parallel"]}
      outs(%p : memref<128x256xf32>) {
  ^bb0(%o: f32):
    linalg.yield %zero : f32
  }
  linalg.generic {indexing_maps = [#mA, #mB, #mC], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<128x64xbf16>, memref<256x64xbf16>) outs(%p : memref<128x256xf32>) {
  ^bb0(%a: bf16, %b: bf16, %acc: f32):
    %ae = arith.extf %a : bf16 to f32
    %be = arith.extf %b : bf16 to f32
    %m = arith.mulf %ae, %be : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  %up = memref.alloc() : memref<128x256xbf16>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%p : memref<128x256xf32>) outs(%up : memref<128x256xbf16>) {
  ^bb0(%v: f32, %o: bf16):
    %r = arith.truncf %v : f32 to bf16
    linalg.yield %r : bf16
  }
  linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%gate, %up : memref<128x256xbf16>, memref<128x256xbf16>) outs(%h : memref<128x256xbf16>) {
  ^bb0(%g: bf16, %u: bf16, %o: bf16):
    %ge = arith.extf %g : bf16 to f32
    %n = arith.negf %ge : f32
    %e = math.exp %n : f32
    %d = arith.addf %e, %one : f32
    %sg = arith.divf %ge, %d : f32
    %sr = arith.truncf %sg : f32 to bf16
    %y = arith.mulf %sr, %u : bf16
    linalg.yield %y : bf16
  }
  return
}
