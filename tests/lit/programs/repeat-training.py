# RUN: %PYTHON %s | FileCheck %s
# Looped layers (WORKLOADS.md, Looped TinyMoE at toy size): a 2-layer MLP block applied 3
# times with shared weights between a pre and a post projection, trained with a rule.  The
# joint trace holds one latch.repeat node (forward) and one latch.repeat_bwd node (backward).
# The program keeps a forward loop that stacks each visit's input (latch.scan with no xs ->
# scf.for) and a reverse loop (latch.loop -> scf.for) that reads visit times-1-i, calls the
# body's VJP (which rematerialises the body forward) and accumulates the shared weights'
# gradients across the visits.
import torch
import torch.nn as nn
import torch.nn.functional as F

import latch
from latch.frontend import importer, structured, trace_loss_and_grads
from latch.frontend.support import check_supported
from mlir import ir

import latch.dialect


class Block(nn.Module):
    def __init__(self, d=8, h=16):
        super().__init__()
        self.fc1 = nn.Linear(d, h)
        self.fc2 = nn.Linear(h, d)

    def forward(self, x):
        return x + self.fc2(torch.tanh(self.fc1(x)))


class Looped(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = nn.Linear(6, 8)
        self.block = Block()
        self.post = nn.Linear(8, 3)

    def forward(self, x, y):
        return F.mse_loss(self.post(latch.repeat(self.block, self.pre(x), 3)), y)


torch.manual_seed(0)
traced = trace_loss_and_grads(Looped(), (torch.zeros(5, 6), torch.zeros(5, 3)))
print("// structured nodes:", [str(n.target) for n in traced.graph_module.graph.nodes
                               if str(n.target).startswith("latch.")])
latch_level = structured.import_structured(traced, "loss_and_grads", importer._lower_isolated,
                                           check_supported, latch_level=True)
lowered = importer.import_to_linalg(traced, "loss_and_grads")
with ir.Context() as ctx:
    latch.dialect.load(ctx)
    print(ir.Module.parse(latch_level))
    print("// -----")
    print(ir.Module.parse(lowered))
print("// counts: scf.for=%d" % lowered.count('"scf.for"'))

# CHECK: // structured nodes: ['latch.repeat.default', 'latch.repeat_bwd.default']
# CHECK-DAG: func.func private @loss_and_grads__repeat0_body(%{{.*}}: tensor<5x8xf32>, %{{.*}}: tensor<16x8xf32>, %{{.*}}: tensor<16xf32>, %{{.*}}: tensor<8x16xf32>, %{{.*}}: tensor<8xf32>) -> tensor<5x8xf32>
# CHECK-DAG: func.func private @loss_and_grads__repeat0_vjp(%{{.*}}: tensor<5x8xf32>, %{{.*}}: tensor<5x8xf32>, %{{.*}}: tensor<16x8xf32>, %{{.*}}: tensor<16xf32>, %{{.*}}: tensor<8x16xf32>, %{{.*}}: tensor<8xf32>) -> (tensor<5x8xf32>, tensor<16x8xf32>, tensor<16xf32>, tensor<8x16xf32>, tensor<8xf32>)
# CHECK-LABEL: func.func @loss_and_grads(
# Forward: one loop over the 3 visits, stacking each visit's input.
# CHECK: %[[FWD:.*]]:2 = "latch.scan"(%{{.*}}) ({
# CHECK: "latch.call"({{.*}}) {callee = @loss_and_grads__repeat0_body}
# CHECK: }) {length = 3 : i64, num_carries = 1 : i64} : (tensor<5x8xf32>) -> (tensor<5x8xf32>, tensor<3x5x8xf32>)
# Backward: one loop in reverse, accumulating the 4 shared-weight gradients.
# CHECK: "latch.loop"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) ({
# CHECK: arith.constant 2 : i64
# CHECK: arith.subi
# CHECK: tensor.extract_slice %[[FWD]]#1
# CHECK: "latch.call"({{.*}}) {callee = @loss_and_grads__repeat0_vjp}
# CHECK-COUNT-4: "latch.accumulate"
# CHECK: "latch.yield"
# CHECK: }) {times = 3 : i64}
# CHECK-NOT: latch.loop
# CHECK-LABEL: // -----
# CHECK-NOT: func.func private
# CHECK: func.func @loss_and_grads(
# CHECK: %[[F:.*]]:2 = scf.for {{.*}} -> (tensor<5x8xf32>, tensor<3x5x8xf32>)
# CHECK: math.tanh
# CHECK: tensor.insert_slice
# CHECK: scf.for {{.*}} -> (tensor<5x8xf32>, tensor<16x8xf32>, tensor<16xf32>, tensor<8x16xf32>, tensor<8xf32>)
# CHECK: arith.subi
# CHECK: tensor.extract_slice %[[F]]#1
# CHECK: math.tanh
# CHECK: scf.yield
# CHECK: return
# CHECK: // counts: scf.for=2
