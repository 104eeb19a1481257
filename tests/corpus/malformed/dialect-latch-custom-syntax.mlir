// CASE: unknown-dialect: a Latch op written in custom syntax (Latch ops are generic-form only)
// EXPECT: Dialect `latch' not found for custom op 'latch.state'
latch.state @w : tensor<4xf32>
