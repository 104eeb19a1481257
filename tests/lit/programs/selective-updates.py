# RUN: %PYTHON %s | latch-opt | FileCheck %s --check-prefix=LATCH
# RUN: %PYTHON %s | latch-opt --pass-pipeline='builtin.module(latch-lower-rules)' | FileCheck %s
# Selective updates (WORKLOADS.md): shared weights take AdamW every microbatch; expert
# weights accumulate their gradients and step every 16th.  The program keeps the expert
# optimizer inside a predicated region, so on the 15 other microbatches the expert moments
# are neither read nor written by any kernel: after lowering, the expert AdamW sits inside
# an scf.if on (count % 16 == 0) and only the accumulation runs outside it.
from latch import optim
from latch.optim.emit import build_update_module

adamw = optim.AdamW(3e-4, betas=(0.9, 0.95), weight_decay=0.1)
rule = optim.partition({"*.w1": optim.every(16, adamw), "*": adamw})
print(build_update_module([("moe.w1", "tensor<8x4x4xf32>"), ("attn.w", "tensor<4x4xf32>")],
                          rule, loss_and_grads=None))  # gradients arrive as inputs

# LATCH-DAG: "latch.state"() {{{.*}}sym_name = "moe.w1.grad_acc"
# LATCH-DAG: "latch.state"() {{{.*}}sym_name = "group0.every.count"
# LATCH: "latch.update"
# LATCH: "latch.accumulate"
# LATCH: "latch.every"
# LATCH: "latch.adamw"({{.*}}) {{.*}} : (tensor<8x4x4xf32>
# LATCH: "latch.yield"
# LATCH: period = 16 : i64
# LATCH: "latch.adamw"({{.*}}) {{.*}} : (tensor<4x4xf32>

# CHECK-LABEL: func.func @update(
# CHECK: arith.remsi %{{.*}}, %c16_i64 : i64
# CHECK: %[[ON:.*]] = arith.cmpi eq
# CHECK: scf.if %[[ON]] -> (tensor<8x4x4xf32>, tensor<8x4x4xf32>, tensor<8x4x4xf32>, tensor<8x4x4xf32>
# CHECK: linalg.generic
# CHECK: math.sqrt
# CHECK: scf.yield
# CHECK: } else {
# CHECK-NOT: math.sqrt
# CHECK: scf.yield
# CHECK: }
# The shared parameter's AdamW runs unconditionally, after the region.
# CHECK: linalg.generic
# CHECK: math.sqrt
# CHECK: return
