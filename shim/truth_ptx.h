/* truth_ptx.h — the %locality_domain_id marker as PTX text (included by shim/truth.c and by
 * tests/compat, which assembles it with the 9.5-only register swapped for %smid). */
#ifndef LDSHIM_TRUTH_PTX_H
#define LDSHIM_TRUTH_PTX_H

/* PTX ISA 9.5 (CUDA 13.5): thread 0 of each block writes 1 + %locality_domain_id under its
 * %smid, after holding the SM for `hold` ns so that the blocks spread over every SM. Shipped
 * as text for the driver to JIT: the 13.0 toolkit's ptxas cannot assemble 9.5. */
static const char ld_truth_ldid_ptx[] =
    ".version 9.5\n"
    ".target sm_100\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry ldtruth_domain_id(\n"
    "    .param .u64 out,\n"
    "    .param .u32 nsms,\n"
    "    .param .u32 hold\n"
    ")\n"
    "{\n"
    "    .reg .pred %p<4>;\n"
    "    .reg .b32 %r<8>;\n"
    "    .reg .b64 %rd<8>;\n"
    "    mov.u32 %r1, %tid.x;\n"
    "    setp.ne.u32 %p1, %r1, 0;\n"
    "    @%p1 bra DONE;\n"
    "    ld.param.u32 %r5, [hold];\n"
    "    cvt.u64.u32 %rd5, %r5;\n"
    "    mov.u64 %rd4, %globaltimer;\n"
    "SPIN:\n"
    "    mov.u64 %rd6, %globaltimer;\n"
    "    sub.u64 %rd7, %rd6, %rd4;\n"
    "    setp.lt.u64 %p3, %rd7, %rd5;\n"
    "    @%p3 bra SPIN;\n"
    "    mov.u32 %r2, %smid;\n"
    "    ld.param.u32 %r3, [nsms];\n"
    "    setp.ge.u32 %p2, %r2, %r3;\n"
    "    @%p2 bra DONE;\n"
    "    mov.u32 %r4, %locality_domain_id;\n"
    "    add.u32 %r4, %r4, 1;\n"
    "    ld.param.u64 %rd1, [out];\n"
    "    cvta.to.global.u64 %rd1, %rd1;\n"
    "    mul.wide.u32 %rd2, %r2, 4;\n"
    "    add.u64 %rd3, %rd1, %rd2;\n"
    "    st.global.u32 [%rd3], %r4;\n"
    "DONE:\n"
    "    ret;\n"
    "}\n";

#endif
