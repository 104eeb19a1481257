// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-to-llvm)' | FileCheck %s
// A program from the fuzzed-lowering grammar (tests/py/fuzz_programs.py), kept as a
// regression seed: broadcasting with the broadcast operand first, amax with keepdim, a
// broadcast (batched x 2-D) matmul, log_softmax, a transpose and a full mean to rank 0.
// Produced by tests/py/test_fuzz_lowering.py:write_reproducer (the linalg input of the CPU
// pipeline); reproducers of fuzz failures go next to it, named after the bug.
//
// CHECK: llvm.func @malloc
// CHECK-LABEL: llvm.func @main(
// CHECK-SAME: latch.arena_bytes = {{[0-9]+}}
// CHECK: llvm.call @malloc
// CHECK: llvm.intr.maximum
// CHECK: llvm.call @free
// CHECK: llvm.return
// CHECK-NOT: linalg.
// CHECK-NOT: memref.
// CHECK-NOT: tensor<
//
// regression seed: broadcast, amax keepdim, broadcast matmul, log_softmax, transpose, full mean
//
// def f(x0, x1, x2):   # shapes [[2, 1, 3], [4, 3], [3, 5]], seed 7
//     h = x0
//     h = mul(x1, h)   # -> [2, 4, 3]
//     h = h.amax(dim=1, keepdim=True)   # -> [2, 1, 3]
//     h = torch.matmul(h, x2)   # -> [2, 1, 5]
//     h = torch.log_softmax(h, dim=-1)   # -> [2, 1, 5]
//     h = h.transpose(0, 2)   # -> [5, 1, 2]
//     h = h.mean()   # -> []
//     return h
#map = affine_map<(d0, d1, d2) -> (d1, d2)>
#map1 = affine_map<(d0, d1, d2) -> (d0, 0, d2)>
#map2 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#map3 = affine_map<(d0, d1, d2) -> (d0, d2)>
#map4 = affine_map<(d0, d1, d2) -> (d2, d1)>
#map5 = affine_map<(d0, d1, d2) -> (d0, d1)>
#map6 = affine_map<(d0, d1, d2) -> (d0, d1, 0)>
#map7 = affine_map<(d0, d1, d2) -> ()>
#map8 = affine_map<() -> ()>
"builtin.module"() ({
  "func.func"() <{function_type = (tensor<2x1x3xf32>, tensor<4x3xf32>, tensor<3x5xf32>) -> tensor<f32>, sym_name = "main"}> ({
  ^bb0(%arg0: tensor<2x1x3xf32>, %arg1: tensor<4x3xf32>, %arg2: tensor<3x5xf32>):
    %0 = "arith.constant"() <{value = 0 : i64}> : () -> i64
    %1 = "arith.constant"() <{value = 0xFF800000 : f32}> : () -> f32
    %2 = "arith.constant"() <{value = 0.000000e+00 : f32}> : () -> f32
    %3 = "arith.constant"() <{value = 1.000000e+01 : f32}> : () -> f32
    %4 = "tensor.empty"() : () -> tensor<2x4x3xf32>
    %5 = "linalg.generic"(%arg1, %arg0, %4) <{indexing_maps = [#map, #map1, #map2], iterator_types = [#linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>], operandSegmentSizes = array<i32: 2, 1>}> ({
    ^bb0(%arg44: f32, %arg45: f32, %arg46: f32):
      %54 = "arith.mulf"(%arg44, %arg45) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      "linalg.yield"(%54) : (f32) -> ()
    }) : (tensor<4x3xf32>, tensor<2x1x3xf32>, tensor<2x4x3xf32>) -> tensor<2x4x3xf32>
    %6 = "tensor.empty"() : () -> tensor<2x3xi64>
    %7 = "linalg.fill"(%0, %6) <{operandSegmentSizes = array<i32: 1, 1>}> ({
    ^bb0(%arg42: i64, %arg43: i64):
      "linalg.yield"(%arg42) : (i64) -> ()
    }) : (i64, tensor<2x3xi64>) -> tensor<2x3xi64>
    %8 = "tensor.empty"() : () -> tensor<2x3xf32>
    %9 = "linalg.fill"(%1, %8) <{operandSegmentSizes = array<i32: 1, 1>}> ({
    ^bb0(%arg40: f32, %arg41: f32):
      "linalg.yield"(%arg40) : (f32) -> ()
    }) : (f32, tensor<2x3xf32>) -> tensor<2x3xf32>
    %10:2 = "linalg.generic"(%5, %9, %7) <{indexing_maps = [#map2, #map3, #map3], iterator_types = [#linalg.iterator_type<parallel>, #linalg.iterator_type<reduction>, #linalg.iterator_type<parallel>], operandSegmentSizes = array<i32: 1, 2>}> ({
    ^bb0(%arg37: f32, %arg38: f32, %arg39: i64):
      %49 = "linalg.index"() <{dim = 1 : i64}> : () -> index
      %50 = "arith.index_cast"(%49) : (index) -> i64
      %51 = "arith.maximumf"(%arg37, %arg38) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      %52 = "arith.cmpf"(%arg37, %arg38) <{fastmath = #arith.fastmath<none>, predicate = 2 : i64}> : (f32, f32) -> i1
      %53 = "arith.select"(%52, %50, %arg39) : (i1, i64, i64) -> i64
      "linalg.yield"(%51, %53) : (f32, i64) -> ()
    }) : (tensor<2x4x3xf32>, tensor<2x3xf32>, tensor<2x3xi64>) -> (tensor<2x3xf32>, tensor<2x3xi64>)
    %11 = "tensor.empty"() : () -> tensor<2x5xf32>
    %12 = "linalg.fill"(%2, %11) <{operandSegmentSizes = array<i32: 1, 1>}> ({
    ^bb0(%arg35: f32, %arg36: f32):
      "linalg.yield"(%arg35) : (f32) -> ()
    }) : (f32, tensor<2x5xf32>) -> tensor<2x5xf32>
    %13 = "linalg.matmul"(%10#0, %arg2, %12) <{indexing_maps = [#map3, #map4, #map5], operandSegmentSizes = array<i32: 2, 1>}> ({
    ^bb0(%arg32: f32, %arg33: f32, %arg34: f32):
      %47 = "arith.mulf"(%arg32, %arg33) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      %48 = "arith.addf"(%arg34, %47) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      "linalg.yield"(%48) : (f32) -> ()
    }) : (tensor<2x3xf32>, tensor<3x5xf32>, tensor<2x5xf32>) -> tensor<2x5xf32>
    %14 = "tensor.expand_shape"(%13) <{reassociation = [[0], [1, 2]], static_output_shape = array<i64: 2, 1, 5>}> : (tensor<2x5xf32>) -> tensor<2x1x5xf32>
    %15 = "tensor.empty"() : () -> tensor<2x1xi64>
    %16 = "linalg.fill"(%0, %15) <{operandSegmentSizes = array<i32: 1, 1>}> ({
    ^bb0(%arg30: i64, %arg31: i64):
      "linalg.yield"(%arg30) : (i64) -> ()
    }) : (i64, tensor<2x1xi64>) -> tensor<2x1xi64>
    %17 = "tensor.empty"() : () -> tensor<2x1xf32>
    %18 = "linalg.fill"(%1, %17) <{operandSegmentSizes = array<i32: 1, 1>}> ({
    ^bb0(%arg28: f32, %arg29: f32):
      "linalg.yield"(%arg28) : (f32) -> ()
    }) : (f32, tensor<2x1xf32>) -> tensor<2x1xf32>
    %19:2 = "linalg.generic"(%14, %18, %16) <{indexing_maps = [#map2, #map5, #map5], iterator_types = [#linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>, #linalg.iterator_type<reduction>], operandSegmentSizes = array<i32: 1, 2>}> ({
    ^bb0(%arg25: f32, %arg26: f32, %arg27: i64):
      %42 = "linalg.index"() <{dim = 2 : i64}> : () -> index
      %43 = "arith.index_cast"(%42) : (index) -> i64
      %44 = "arith.maximumf"(%arg25, %arg26) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      %45 = "arith.cmpf"(%arg25, %arg26) <{fastmath = #arith.fastmath<none>, predicate = 2 : i64}> : (f32, f32) -> i1
      %46 = "arith.select"(%45, %43, %arg27) : (i1, i64, i64) -> i64
      "linalg.yield"(%44, %46) : (f32, i64) -> ()
    }) : (tensor<2x1x5xf32>, tensor<2x1xf32>, tensor<2x1xi64>) -> (tensor<2x1xf32>, tensor<2x1xi64>)
    %20 = "tensor.expand_shape"(%19#0) <{reassociation = [[0], [1, 2]], static_output_shape = array<i64: 2, 1, 1>}> : (tensor<2x1xf32>) -> tensor<2x1x1xf32>
    %21 = "tensor.empty"() : () -> tensor<2x1x5xf32>
    %22 = "linalg.generic"(%14, %20, %21) <{indexing_maps = [#map2, #map6, #map2], iterator_types = [#linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>], operandSegmentSizes = array<i32: 2, 1>}> ({
    ^bb0(%arg22: f32, %arg23: f32, %arg24: f32):
      %41 = "arith.subf"(%arg22, %arg23) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      "linalg.yield"(%41) : (f32) -> ()
    }) : (tensor<2x1x5xf32>, tensor<2x1x1xf32>, tensor<2x1x5xf32>) -> tensor<2x1x5xf32>
    %23 = "linalg.generic"(%22, %21) <{indexing_maps = [#map2, #map2], iterator_types = [#linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>], operandSegmentSizes = array<i32: 1, 1>}> ({
    ^bb0(%arg20: f32, %arg21: f32):
      %40 = "math.exp"(%arg20) <{fastmath = #arith.fastmath<none>}> : (f32) -> f32
      "linalg.yield"(%40) : (f32) -> ()
    }) : (tensor<2x1x5xf32>, tensor<2x1x5xf32>) -> tensor<2x1x5xf32>
    %24 = "tensor.empty"() : () -> tensor<2x1x1xf32>
    %25 = "linalg.fill"(%2, %24) <{operandSegmentSizes = array<i32: 1, 1>}> ({
    ^bb0(%arg18: f32, %arg19: f32):
      "linalg.yield"(%arg18) : (f32) -> ()
    }) : (f32, tensor<2x1x1xf32>) -> tensor<2x1x1xf32>
    %26 = "linalg.generic"(%23, %25) <{indexing_maps = [#map2, #map6], iterator_types = [#linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>, #linalg.iterator_type<reduction>], operandSegmentSizes = array<i32: 1, 1>}> ({
    ^bb0(%arg16: f32, %arg17: f32):
      %39 = "arith.addf"(%arg16, %arg17) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      "linalg.yield"(%39) : (f32) -> ()
    }) : (tensor<2x1x5xf32>, tensor<2x1x1xf32>) -> tensor<2x1x1xf32>
    %27 = "linalg.generic"(%26, %24) <{indexing_maps = [#map2, #map2], iterator_types = [#linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>], operandSegmentSizes = array<i32: 1, 1>}> ({
    ^bb0(%arg14: f32, %arg15: f32):
      %38 = "math.log"(%arg14) <{fastmath = #arith.fastmath<none>}> : (f32) -> f32
      "linalg.yield"(%38) : (f32) -> ()
    }) : (tensor<2x1x1xf32>, tensor<2x1x1xf32>) -> tensor<2x1x1xf32>
    %28 = "linalg.generic"(%22, %27, %21) <{indexing_maps = [#map2, #map6, #map2], iterator_types = [#linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>], operandSegmentSizes = array<i32: 2, 1>}> ({
    ^bb0(%arg11: f32, %arg12: f32, %arg13: f32):
      %37 = "arith.subf"(%arg11, %arg12) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      "linalg.yield"(%37) : (f32) -> ()
    }) : (tensor<2x1x5xf32>, tensor<2x1x1xf32>, tensor<2x1x5xf32>) -> tensor<2x1x5xf32>
    %29 = "tensor.empty"() : () -> tensor<5x1x2xf32>
    %30 = "linalg.transpose"(%28, %29) <{permutation = array<i64: 2, 1, 0>}> ({
    ^bb0(%arg9: f32, %arg10: f32):
      "linalg.yield"(%arg9) : (f32) -> ()
    }) : (tensor<2x1x5xf32>, tensor<5x1x2xf32>) -> tensor<5x1x2xf32>
    %31 = "tensor.empty"() : () -> tensor<f32>
    %32 = "linalg.fill"(%2, %31) <{operandSegmentSizes = array<i32: 1, 1>}> ({
    ^bb0(%arg7: f32, %arg8: f32):
      "linalg.yield"(%arg7) : (f32) -> ()
    }) : (f32, tensor<f32>) -> tensor<f32>
    %33 = "linalg.generic"(%30, %32) <{indexing_maps = [#map2, #map7], iterator_types = [#linalg.iterator_type<reduction>, #linalg.iterator_type<reduction>, #linalg.iterator_type<reduction>], operandSegmentSizes = array<i32: 1, 1>}> ({
    ^bb0(%arg5: f32, %arg6: f32):
      %36 = "arith.addf"(%arg5, %arg6) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      "linalg.yield"(%36) : (f32) -> ()
    }) : (tensor<5x1x2xf32>, tensor<f32>) -> tensor<f32>
    %34 = "linalg.generic"(%33, %31) <{indexing_maps = [#map8, #map8], iterator_types = [], operandSegmentSizes = array<i32: 1, 1>}> ({
    ^bb0(%arg3: f32, %arg4: f32):
      %35 = "arith.divf"(%arg3, %3) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      "linalg.yield"(%35) : (f32) -> ()
    }) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    "func.return"(%34) : (tensor<f32>) -> ()
  }) : () -> ()
}) : () -> ()
