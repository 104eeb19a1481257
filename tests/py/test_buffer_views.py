"""buffer_views.may_write: which ops may write an allocation's bytes."""
from __future__ import annotations

_MODULE = """
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @f(%a: memref<4xf32>) kernel {
      gpu.return
    }
  }
  func.func @g() {
    %c1 = arith.constant 1 : index
    %c0 = arith.constant 0 : index
    %a = memref.alloc() : memref<8xf32>
    %b = memref.alloc() : memref<4xf32>
    %v = memref.subview %a[4] [4] [1] : memref<8xf32> to memref<4xf32, strided<[1], offset: 4>>
    %w = memref.cast %v : memref<4xf32, strided<[1], offset: 4>> to memref<4xf32, strided<[1], offset: ?>>
    %x = memref.load %a[%c0] : memref<8xf32>
    gpu.launch_func @k::@f blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1) args(%b : memref<4xf32>)
    memref.store %x, %v[%c0] : memref<4xf32, strided<[1], offset: 4>>
    return
  }
}
"""


def test_a_kernel_launch_may_write_the_buffers_it_is_given():
    from mlir import ir

    from latch.passes.buffer_views import may_write

    ctx = ir.Context()
    with ctx:
        module = ir.Module.parse(_MODULE)
        func = list(module.body.operations)[1]
        ops = [o.operation for o in func.regions[0].blocks[0].operations]
        a, b = ops[2].results[0], ops[3].results[0]
        load, launch, store = ops[6], ops[7], ops[8]
        assert launch.name == "gpu.launch_func"
        assert may_write(launch, b) and not may_write(launch, a)
        assert not may_write(load, a)
        assert may_write(store, a) and not may_write(store, b)
