/* impl/variants.h — the kernels' variant bits (KParams::tune), the one place they are defined.
 *
 * A variant bit switches a kernel between two implementations of one step at run time, so that
 * both can be timed in one process on the same data. 0 is the tuned default, and it is all that
 * libldmoe's entry points ever pass. A build that wants to choose variants (the lab,
 * bench/moe/lab) sets KParams::tune itself and reads these values from here; Python reads them
 * from this file too (bench/moe/lab/ldmoe_lab.py). Values of removed variants are not reused, so
 * a recorded run's bits keep their meaning (0x40, 0x80 and 0x800-0x2000 are such). Plain C: included by C headers as well as kernels.
 */
#ifndef LDMOE_IMPL_VARIANTS_H
#define LDMOE_IMPL_VARIANTS_H

#define LDMOE_TUNE_SCALAR_EPILOGUE 0x1u   /* staged tiles: store from registers, not via shared memory */
#define LDMOE_TUNE_TOKENS_NORMAL   0x2u   /* decode tiles: token boxes evict-normal in L2, not evict-last */
#define LDMOE_TUNE_WEIGHTS_NORMAL  0x4u   /* decode tiles: weight boxes evict-normal in L2 */
#define LDMOE_TUNE_STREAM_STORES   0x8u   /* staged epilogue: st.global.cs (evict-first) output stores */
#define LDMOE_TUNE_DYNAMIC_ONLY    0x10u  /* aware/unaware: claim every tile from the counters (no
                                             static waves in SM order first) */
#define LDMOE_TUNE_NO_DEPENDENT    0x20u  /* FP8: an ordinary launch, not a programmatic dependent one */
/* The last wave's claims (TicketStream::late_tail): by default made when a tile ends in the FP8
 * kernels where experts have several m-blocks (prefill), one tile ahead elsewhere (Loader::start);
 * these force one way in every launch. */
#define LDMOE_TUNE_LATE_TAIL       0x200u /* claim the next tile when the current one is done */
#define LDMOE_TUNE_EARLY_TAIL      0x400u /* claim one tile ahead */
#define LDMOE_TUNE_ALL (LDMOE_TUNE_SCALAR_EPILOGUE | LDMOE_TUNE_TOKENS_NORMAL | LDMOE_TUNE_WEIGHTS_NORMAL | \
                        LDMOE_TUNE_STREAM_STORES | LDMOE_TUNE_DYNAMIC_ONLY | LDMOE_TUNE_NO_DEPENDENT |    \
                        LDMOE_TUNE_LATE_TAIL | LDMOE_TUNE_EARLY_TAIL)

/* Diagnostic bits: they remove work from the warp-specialized kernels, to measure what the work
 * costs; results are wrong by design. Only kernels instantiated with a diagnostic configuration
 * (a tile shape with `static constexpr bool DIAG = true`, params.cuh diag_of) test them; in every
 * other kernel the code that reads them is not compiled.
 *   NO_MMA: consumers wait for and release every stage but issue no wgmma; NO_STORE: no output
 *   stores; NO_TOKENS / HALF_TOKENS (decode orientation): the producer loads no token boxes /
 *   token boxes for even k-steps only (the wgmmas read whatever the stage holds), to price the
 *   tokens' L2 reads; NO_SCALE_MATH (FP8 block scales): the sums add the accumulators as rowwise
 *   does (the scales are still loaded with each stage). */
#define LDMOE_TUNE_DIAG_NO_MMA        0x40000000u
#define LDMOE_TUNE_DIAG_NO_STORE      0x20000000u
#define LDMOE_TUNE_DIAG_NO_TOKENS     0x10000000u
#define LDMOE_TUNE_DIAG_HALF_TOKENS   0x08000000u
#define LDMOE_TUNE_DIAG_NO_SCALE_MATH 0x02000000u
#define LDMOE_TUNE_DIAG_ALL (LDMOE_TUNE_DIAG_NO_MMA | LDMOE_TUNE_DIAG_NO_STORE | LDMOE_TUNE_DIAG_NO_TOKENS | \
                             LDMOE_TUNE_DIAG_HALF_TOKENS | LDMOE_TUNE_DIAG_NO_SCALE_MATH)

#endif /* LDMOE_IMPL_VARIANTS_H */
