/* probe_fatbin.S — embeds build/kernels/probe.fatbin (kernels/probe/probe.cu) as the
 * hidden read-only symbol ld_probe_fatbin, which shim/probe.c hands to cuModuleLoadData.
 * LD_PROBE_FATBIN_PATH is passed by kernels/kernels.mk. */
    .section .rodata.ld_probe_fatbin, "a", @progbits
    .balign 64
    .globl ld_probe_fatbin
    .hidden ld_probe_fatbin
    .type ld_probe_fatbin, @object
ld_probe_fatbin:
    .incbin LD_PROBE_FATBIN_PATH
ld_probe_fatbin_end:
    .size ld_probe_fatbin, ld_probe_fatbin_end - ld_probe_fatbin
    .byte 0
    .section .note.GNU-stack, "", @progbits
