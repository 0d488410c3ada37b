/* impl/div_rn.h — x / s, correctly rounded, in three fused operations once 1/s is known (C and
 * CUDA; the CPU tests check it against IEEE division over every bf16 x).
 *
 * The quantizer divides every element of a row by the row's scale and must match torch's
 * `x / scale` bit for bit; the IEEE division costs a reciprocal, its refinement and a range check
 * per element. With r = 1/s correctly rounded (one division per row), q0 = x·r is within an ulp
 * of x / s, the residual x − q0·s is exact in one fma, and q0 + residual·r rounds to the
 * correctly rounded quotient (Markstein's correction). Valid for finite x while s and r are
 * far from the subnormals: callers keep the division for scales outside [2^-80, 2^126] (below,
 * the residual of a quotient that still matters to e4m3 can fall among the subnormals and lose
 * bits). The sign is taken from x so that −0 stays −0 (the residual's +0 would make it +0). */
#ifndef LDMOE_DIV_RN_H
#define LDMOE_DIV_RN_H

#include <math.h>

#ifdef __CUDACC__
#define LDMOE_DIV_FN __host__ __device__ __forceinline__
#else
#define LDMOE_DIV_FN static inline
#endif

#define LDMOE_DIV_MIN_SCALE 0x1p-80f
#define LDMOE_DIV_MAX_SCALE 0x1p126f

LDMOE_DIV_FN float ldmoe_div_by(float x, float s, float r) {
    const float q0 = x * r;
    const float res = fmaf(-q0, s, x);
    return copysignf(fmaf(res, r, q0), x);
}

#endif /* LDMOE_DIV_RN_H */
