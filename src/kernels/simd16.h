// The logical 16-lane vector every float kernel outside the quantized GEMM is written with
// (ops, attention, float-weight matmul), and the contract its per-ISA vocabularies meet.
//
// One arithmetic, every instruction set. A kernel body is written once, in an -inl header,
// as a template on a vocabulary V (a struct of static inline functions):
//
//   scalar::Simd16   simd16_scalar.h   16 floats in an array, emulated lane by lane
//   avx2::Simd16     simd16_avx2.h     two 8-lane ymm registers (lanes 0-7, 8-15)
//   avx512::Simd16   simd16_avx512.h   one zmm register
//
// and each level instantiates it in its own translation unit (compiled with that level's
// flags). Because every operation below is defined lane by lane with IEEE single (or double)
// rounding, and reductions follow one fixed tree, the three instantiations give the same bits
// for the same inputs: a sequence's logits do not depend on the instruction set. The scalar
// instantiation is the reference (kernels' ref:: functions) and the oracle of the tests.
//
// The vocabulary (F: 16 floats; D: 16 doubles; M: a 16-lane predicate):
//   zero(), set1(x), load(p), load_n(p, n, fill), store(p, v), store_n(p, v, n)
//       load_n: lanes >= n hold `fill` (n in [0, 16]); store_n writes lanes < n only.
//   load_f16(p), load_f16_n(p, n)     binary16 → float (exact); lanes >= n are 0
//   load_bf16(p), load_bf16_n(p, n)   bfloat16 → float (exact)
//   store_bf16(p, v), store_bf16_n(p, v, n)  float → bfloat16 as AVX512_BF16's vcvtneps2bf16
//                                     converts: to nearest even, subnormal inputs to a signed
//                                     zero, NaN quieted (x >> 16 | 0x40); store_n writes lanes < n
//   load_i8(p)                        16 int8 → float (exact)
//   f16_to_f32(h)                     one binary16 → float (exact), a scalar
//   add sub mul div                   IEEE, one rounding each
//   fma(a, b, c) = a·b + c, fnma(a, b, c) = c − a·b: one rounding (fused on every level)
//   max(a, b) = a > b ? a : b, min(a, b) = a < b ? a : b   (x86 semantics: with a NaN
//                                     operand the result is b)
//   abs(a)                            sign bit cleared
//   round(a) to nearest integer, ties to even; floor(a)
//   exp2i(n)                          2^n for integral n in [-126, 127] (bit construction)
//   lt(a, b) → M; select(m, a, b) = m ? a : b
//   hsum(v), hmax(v)                  the fixed tree: lane i op lane i+8, then i+4, i+2, i+1
//                                     (op = add or max)
//   hsum16(a, out)                    out[k] = hsum(a[k]) for 16 vectors (the same bits;
//                                     a level may gather the partial sums of several vectors)
//   lane0(v)                          lane 0 as a float
//   dzero(), dadd(d, v): d += double(v), dadd_sq(d, v): d += double(v)²  (the product is
//   exact in double, so one rounding), dhsum(d): the same fixed tree in double.
// Blocking hints (how many logical accumulators a kernel keeps in registers) come with each
// vocabulary; they change which work shares a loop, never any lane's arithmetic.
#pragma once

namespace ubatch::kernels::simd16 {

constexpr int kLanes = 16;

}  // namespace ubatch::kernels::simd16
