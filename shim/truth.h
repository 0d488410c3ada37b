/* truth.h — the probe checked against the driver's own answer, where the driver has one.
 *
 * The topology probe measures which domain each SM is near. A CUDA 13.4+ driver can say it
 * itself, three ways, each of which this module asks (once per device, after the probe, in
 * the device's context) and compares with the measured (physical) map:
 *   split  cuDevSmResourceSplit with one group per locality domain, each group's SMs learned
 *          with the compute binding's marker kernel (compute.h, ld_compute_domain_sms);
 *   count  CU_DEVICE_ATTRIBUTE_LOCALITY_DOMAIN_MULTIPROCESSOR_COUNT: the SMs of each domain
 *          (one number for every domain; SMs beyond it are 13.5's "supplemental" ones);
 *   ldid   %locality_domain_id (PTX ISA 9.5) read per SM by a marker kernel shipped as PTX
 *          text and JIT-compiled by the driver (cuModuleLoadData); a driver that rejects it
 *          is a reason, not an error.
 * On a driver without locality domains (Hopper, CUDA 13.0) none exists and the report says
 * so. When a per-SM source disagrees with the measurement, the policy's topology_source says
 * which map is published: the driver's (default; the measurement is kept as the check) or
 * the probe's. A probe that fell back to the even map never outranks the driver.
 *
 * Thread-safety: ld_truth_check is called once per device by the thread that probed it
 * (topology.c); the record is read after publication. */
#ifndef LDSHIM_TRUTH_H
#define LDSHIM_TRUTH_H

#include <stdint.h>
#include "kernels/ldshim_topology.h"
#include "policy/policy.h"
#include "shim/driver.h"
#include "shim/probe.h"

enum { LD_TRUTH_ABSENT = 0, LD_TRUTH_OK = 1, LD_TRUTH_FAILED = 2 };

typedef struct {
    int state;                       /* LD_TRUTH_*                                           */
    char why[160];                   /* absent/failed: why; ok: what was asked               */
    uint32_t compared, agree;        /* SMs both maps place, and those placed alike          */
    uint8_t map[LDSHIM_MAX_SMS];     /* split, ldid: SM -> domain, 0xff unknown              */
} ld_truth_source_t;

typedef struct {
    int checked;                     /* 1 once ld_truth_check ran for the device              */
    int driver_domains;              /* attribute 149 (0: the driver does not say)            */
    ld_truth_source_t split, ldid;
    ld_truth_source_t count;         /* count: compared = domains, agree = those whose
                                      * measured SMs >= the attribute; map unused            */
    int count_per_domain;            /* the attribute's value (count.state OK)                */
    uint32_t measured_per_domain[LDSHIM_MAX_DOMAINS];
    int disagree;                    /* a per-SM source disagrees with the measurement        */
    int published_driver;            /* 1: the driver's map was published                     */
    const char *published_from;      /* "probe", "split" or "ldid"                            */
    ld_topology_source_t policy;
} ld_truth_t;

/* Ask every source for `dev` (its context current), compare with r->physical and, by
 * `policy`, replace r's maps and published struct with the driver's (physical and
 * balanced; source LDSHIM_SOURCE_DRIVER). Never fails: what could not be asked is recorded. */
void ld_truth_check(const ld_driver_t *d, CUdevice dev, ld_topology_source_t policy, ld_map_mode_t map,
                    ld_probe_result_t *r, ld_truth_t *out);

/* The record as a JSON object (no newline); snprintf semantics. */
int ld_truth_json(const ld_truth_t *t, char *buf, size_t n);

#endif
