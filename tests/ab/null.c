/* null.c — an empty shared object the ldshim-ab tests preload in place of libldshim.so,
 * so that LD_PRELOAD names a real library without bringing the shim into the test. */
int ldshim_ab_null_marker;
