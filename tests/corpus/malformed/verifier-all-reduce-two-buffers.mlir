// CASE: verifier: latch.all_reduce of two buffers (the buffer form takes one flat bucket)
func.func @f(%a: memref<4xf32>, %b: memref<4xf32>) {
  "latch.all_reduce"(%a, %b) {bucket = 0 : i64, reduction = "mean"} : (memref<4xf32>, memref<4xf32>) -> ()
  return
}
