/* cunit_main.h — shared main() for the CUnit programs under tests/unit.
 *
 * A test file defines `static void register_tests(void)` (adding suites with CU_add_suite /
 * CU_add_test) and then includes this header once. The program runs every test, prints
 * CUnit's basic summary, and, when given a path as argv[1], writes "<passed> <failed>" there
 * for tests/summarize.sh. Exit status is non-zero when any assertion or test failed. */
#ifndef LDSHIM_CUNIT_MAIN_H
#define LDSHIM_CUNIT_MAIN_H
#include <CUnit/Basic.h>
#include <stdio.h>

static void register_tests(void);

int main(int argc, char **argv) {
    if (CU_initialize_registry() != CUE_SUCCESS) return 2;
    register_tests();
    if (CU_get_error() != CUE_SUCCESS) { fprintf(stderr, "CUnit: %s\n", CU_get_error_msg()); return 2; }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned run = CU_get_number_of_tests_run();
    unsigned failed = CU_get_number_of_tests_failed();
    unsigned afail = CU_get_number_of_failures();
    if (argc > 1) {
        FILE *f = fopen(argv[1], "w");
        if (f) { fprintf(f, "%u %u\n", run - failed, failed); fclose(f); }
    }
    CU_cleanup_registry();
    return (failed || afail) ? 1 : 0;
}
#endif
