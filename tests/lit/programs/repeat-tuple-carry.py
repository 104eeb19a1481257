# RUN: %PYTHON %s | FileCheck %s
# Looped TinyMoE (WORKLOADS.md) at toy size: 4 MoE layers, layers 1-2 applied twice with
# shared weights (0,1,2,1,2,3), the span being ONE latch.repeat whose carry is the tuple
# (hidden, aux-loss sum) (tests/py/models.py, LoopedTinyMoE).  Trained with a rule, the
# joint trace holds one latch.repeat and one latch.repeat_bwd node; the program keeps ONE
# forward loop over the 2 visits carrying both leaves and stacking each leaf's visit input
# (latch.scan, num_carries = 2, no xs) and ONE reverse loop (latch.loop) that carries both
# leaves' cotangents and accumulates the span's 2 x 8 shared-weight gradients.
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "py"))
from models import make_looped_tiny_moe  # noqa: E402

import latch.dialect  # noqa: E402
from latch.frontend import importer, structured, trace_loss_and_grads  # noqa: E402
from latch.frontend.support import check_supported  # noqa: E402
from mlir import ir  # noqa: E402

model, example = make_looped_tiny_moe(seed=0)
traced = trace_loss_and_grads(model, example)
print("// structured nodes:", [str(n.target) for n in traced.graph_module.graph.nodes
                               if str(n.target).startswith("latch.")])
latch_level = structured.import_structured(traced, "loss_and_grads", importer._lower_isolated,
                                           check_supported, latch_level=True)
lowered = importer.import_to_linalg(traced, "loss_and_grads")
with ir.Context() as ctx:
    latch.dialect.load(ctx)
    m = ir.Module.parse(latch_level)
    main = [o for o in m.body.operations
            if ir.StringAttr(o.attributes["sym_name"]).value == "loss_and_grads"][0]
    print(main)
print("// counts: latch.scan=%d latch.loop=%d" % (latch_level.count('"latch.scan"'),
                                                  latch_level.count('"latch.loop"')))
print("// lowered: scf.for=%d func.func=%d" % (lowered.count('"scf.for"'),
                                               lowered.count('"func.func"')))

# CHECK: // structured nodes: ['latch.repeat.default', 'latch.repeat_bwd.default']
# CHECK-LABEL: func.func @loss_and_grads(
# Forward: one loop over the 2 visits; the carry is (hidden, aux sum), each leaf stacked.
# CHECK: %[[FWD:.*]]:4 = "latch.scan"(%[[H:.*]], %[[AUX:.*]]) ({
# CHECK-NEXT: ^bb0(%[[CH:.*]]: tensor<2x16x32xf32>, %[[CA:.*]]: tensor<f32>):
# CHECK-NEXT: %[[B:.*]]:2 = "latch.call"(%[[CH]], %[[CA]], {{.*}}) {callee = @loss_and_grads__repeat0_body} : (tensor<2x16x32xf32>, tensor<f32>, {{.*}}) -> (tensor<2x16x32xf32>, tensor<f32>)
# CHECK-NEXT: "latch.yield"(%[[B]]#0, %[[B]]#1, %[[CH]], %[[CA]])
# CHECK-NEXT: }) {length = 2 : i64, num_carries = 2 : i64} : (tensor<2x16x32xf32>, tensor<f32>) -> (tensor<2x16x32xf32>, tensor<f32>, tensor<2x2x16x32xf32>, tensor<2xf32>)
# Backward: one loop in reverse over the visits, both leaves' cotangents carried, the 24
# shared-weight gradients (2 layers x 8 tensors) accumulated.
# CHECK: "latch.loop"(%{{.*}}, %{{.*}}, {{.*}}) ({
# CHECK: ^bb0(%{{.*}}: tensor<i64>, %[[GH:.*]]: tensor<2x16x32xf32>, %[[GA:.*]]: tensor<f32>,
# CHECK: arith.constant 1 : i64
# CHECK: arith.subi
# CHECK: %[[XH:.*]] = tensor.extract_slice %[[FWD]]#2[%{{.*}}, 0, 0, 0] [1, 2, 16, 32] [1, 1, 1, 1] : tensor<2x2x16x32xf32> to tensor<2x16x32xf32>
# CHECK: %[[XA:.*]] = tensor.extract_slice %[[FWD]]#3[%{{.*}}] [1] [1] : tensor<2xf32> to tensor<f32>
# CHECK: %[[V:.*]]:18 = "latch.call"(%[[XH]], %[[XA]], %[[GH]], %[[GA]], {{.*}}) {callee = @loss_and_grads__repeat0_vjp}
# CHECK-COUNT-16: "latch.accumulate"
# CHECK: "latch.yield"(%[[V]]#0, %[[V]]#1,
# CHECK: }) {times = 2 : i64}
# CHECK-NOT: "latch.scan"
# CHECK-NOT: "latch.loop"
# CHECK: // counts: latch.scan=1 latch.loop=1
# CHECK: // lowered: scf.for=2 func.func=1
