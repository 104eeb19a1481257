# RUN: %PYTHON %s | FileCheck %s
# GradLev-style token-by-token adaptation (WORKLOADS.md) at a small size: latch.scan over 16
# tokens, each step taking a gradient step on the fast weights W (torch.func.grad inside the
# step function).  The step body is traced once: the traced graph holds one latch.scan node,
# the Latch-level program one latch.scan whose body calls the imported body function, and the
# lowered function one scf.for (16 iterations) with the body inlined once, not unrolled.
import torch

import latch
from latch.frontend import importer, structured, trace_function
from latch.frontend.support import check_supported
from mlir import ir

import latch.dialect

H, D, T, ETA = 2, 8, 16, 0.1


def step(W, qkv):
    q, k, v = qkv

    def inner(W):
        return 0.5 * ((torch.einsum("hij,hj->hi", W, k) - v) ** 2).sum()

    W = W - ETA * torch.func.grad(inner)(W)
    return W, torch.einsum("hij,hj->hi", W, q)


def gradlev(W0, q, k, v):
    return latch.scan(step, W0, (q, k, v))


inputs = (torch.zeros(H, D, D),) + tuple(torch.zeros(T, H, D) for _ in range(3))
traced = trace_function(gradlev, inputs)
print("// structured nodes:", [str(n.target) for n in traced.graph_module.graph.nodes
                               if str(n.target).startswith("latch.")])
latch_level = structured.import_structured(traced, "main", importer._lower_isolated,
                                           check_supported, latch_level=True)
lowered = importer.import_to_linalg(traced, "main")
with ir.Context() as ctx:
    latch.dialect.load(ctx)
    print(ir.Module.parse(latch_level))
    print("// -----")
    print(ir.Module.parse(lowered))
print("// counts: scf.for=%d batch_matmul=%d" % (lowered.count('"scf.for"'),
                                              lowered.count('"linalg.batch_matmul"')))

# CHECK: // structured nodes: ['latch.scan.default']
# CHECK-LABEL: func.func private @main__scan0_body(
# CHECK-SAME: tensor<2x8x8xf32>, %{{.*}}: tensor<2x8xf32>, %{{.*}}: tensor<2x8xf32>, %{{.*}}: tensor<2x8xf32>) -> (tensor<2x8x8xf32>, tensor<2x8xf32>)
# CHECK-LABEL: func.func @main(
# CHECK: "latch.scan"(%arg0, %arg1, %arg2, %arg3) ({
# CHECK-NEXT: ^bb0(%{{.*}}: tensor<2x8x8xf32>, %{{.*}}: tensor<2x8xf32>, %{{.*}}: tensor<2x8xf32>, %{{.*}}: tensor<2x8xf32>):
# CHECK-NEXT: "latch.call"({{.*}}) {callee = @main__scan0_body}
# CHECK-NEXT: "latch.yield"
# CHECK-NEXT: }) {length = 16 : i64, num_carries = 1 : i64} : (tensor<2x8x8xf32>, tensor<16x2x8xf32>, tensor<16x2x8xf32>, tensor<16x2x8xf32>) -> (tensor<2x8x8xf32>, tensor<16x2x8xf32>)
# CHECK-NOT: latch.scan
# CHECK-LABEL: // -----
# CHECK-NOT: func.func private
# CHECK: func.func @main(
# CHECK: %[[C16:.*]] = arith.constant 16 : index
# CHECK: scf.for %{{.*}} = %{{.*}} to %[[C16]] step %{{.*}} iter_args(%{{.*}} = %arg0, %{{.*}} = %{{.*}}) -> (tensor<2x8x8xf32>, tensor<16x2x8xf32>)
# CHECK: tensor.extract_slice %arg1
# CHECK: linalg.generic
# CHECK: tensor.insert_slice
# CHECK: scf.yield
# CHECK-NOT: scf.for
# CHECK-NOT: func.call
# CHECK: return
# The body's three batched matmuls (W k, the gradient's outer product, W q) appear once.
# CHECK: // counts: scf.for=1 batch_matmul=3
