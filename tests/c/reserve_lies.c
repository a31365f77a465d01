/*
 * A reservation plugin that breaks the output protocol of the `reserve` hook (sdk/ABI.md §9, the
 * allocation buffer of ABI 1.3) on demand, for the plugin host's tests. The configuration names
 * the mode (the first of these words it contains):
 *   grow            BUFFER_FULL asking for 100 allocation slots more than offered (and no more
 *                   decision slots), then, on the retry, a PLAN of the subject with that many
 *                   pieces: piece i of atom 0 over [i, i + 1) ms, one bundle;
 *   grow-decisions  BUFFER_FULL asking for one decision slot more than offered, then that many
 *                   PLANs of the subject and no pieces;
 *   same-size       BUFFER_FULL asking for no more than was offered, of either buffer;
 *   full-twice      BUFFER_FULL asking for more allocation slots on every attempt;
 *   over-limit      BUFFER_FULL asking for 2^40 allocation slots;
 *   len-over        GANTRY_OK with allocations_len one above the capacity offered;
 *   probe           every hook fails with a message describing the buffers and plan it got.
 * It implements `place` too, so that a test can see what a non-reserve call is offered.
 */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gantry.h"

enum Mode { GROW, GROW_DECISIONS, SAME_SIZE, FULL_TWICE, OVER_LIMIT, LEN_OVER, PROBE };

typedef struct Lies {
    enum Mode mode;
    /* What "grow" and "grow-decisions" want: fixed by the first attempt's offer. */
    uint64_t want;
} Lies;

static void say(GantryOutput *out, const char *text) {
    size_t n = strlen(text);
    if (n > out->message_capacity) {
        n = (size_t)out->message_capacity;
    }
    memcpy(out->message, text, n);
    out->message_len = n;
}

static int32_t lies_create(const char *config, uint64_t config_len, void **instance, GantryOutput *out) {
    (void)config_len;
    static const char *names[] = {"grow-decisions", "grow", "same-size", "full-twice",
                                  "over-limit", "len-over", "probe"};
    static const enum Mode modes[] = {GROW_DECISIONS, GROW, SAME_SIZE, FULL_TWICE,
                                      OVER_LIMIT, LEN_OVER, PROBE};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strstr(config, names[i]) != NULL) {
            Lies *lies = calloc(1, sizeof *lies);
            if (lies == NULL) {
                return GANTRY_ERR_INTERNAL;
            }
            lies->mode = modes[i];
            *instance = lies;
            return GANTRY_OK;
        }
    }
    say(out, "reserve-lies: no mode in the configuration");
    return GANTRY_ERR_CONFIG;
}

static void lies_destroy(void *instance) { free(instance); }

static int32_t probe(const GantryView *view, GantryOutput *out) {
    char text[400];
    snprintf(text, sizeof text,
             "hook=%u out=%u allocations_capacity=%llu allocations_null=%d cause=%u subject=%u "
             "plan_queue=%u plan_cpu=%llu step=%llu horizon=%llu details=%llu nodes=%llu pieces=%llu",
             (unsigned)view->hook, (unsigned)out->struct_size,
             (unsigned long long)out->allocations_capacity, out->allocations == NULL,
             (unsigned)view->reserve_cause, (unsigned)view->reserve_subject,
             (unsigned)view->plan_queue, (unsigned long long)view->plan_capacity.cpu_millis,
             (unsigned long long)view->plan_step_ms, (unsigned long long)view->plan_horizon_ms,
             (unsigned long long)view->reservation_details_len,
             (unsigned long long)view->rdl_nodes_len, (unsigned long long)view->allocations_len);
    say(out, text);
    return GANTRY_ERR_INTERNAL;
}

static int32_t lies_place(void *instance, const GantryView *view, GantryOutput *out) {
    out->len = 0;
    out->needed = 0;
    out->message_len = 0;
    return ((Lies *)instance)->mode == PROBE ? probe(view, out) : GANTRY_OK;
}

static int32_t lies_reserve(void *instance, const GantryView *view, GantryOutput *out) {
    out->len = 0;
    out->needed = 0;
    out->message_len = 0;
    out->allocations_len = 0;
    out->allocations_needed = 0;
    uint32_t subject = view->reserve_subject;
    Lies *lies = instance;
    uint64_t want = lies->want;
    switch (lies->mode) {
    case GROW:
        if (out->attempt == 0) {
            lies->want = out->allocations_capacity + 100;
            out->allocations_needed = lies->want;
            return GANTRY_BUFFER_FULL;
        }
        if (out->allocations_capacity < want || out->capacity < 1) {
            say(out, "reserve-lies: the retry's buffers are too small");
            return GANTRY_ERR_INTERNAL;
        }
        for (uint64_t i = 0; i < want; i++) {
            out->allocations[i] = (GantryAllocation){subject, 0, i, i + 1, 1};
        }
        out->allocations_len = want;
        out->decisions[0] = (GantryDecision){GANTRY_DECISION_PLAN_RESERVATION, subject, GANTRY_NONE, 0, 0};
        out->len = 1;
        return GANTRY_OK;
    case GROW_DECISIONS:
        if (out->attempt == 0) {
            lies->want = out->capacity + 1;
            out->needed = lies->want;
            return GANTRY_BUFFER_FULL;
        }
        if (out->capacity < want) {
            say(out, "reserve-lies: the retry's decision buffer is too small");
            return GANTRY_ERR_INTERNAL;
        }
        for (uint64_t i = 0; i < want; i++) {
            out->decisions[i] = (GantryDecision){GANTRY_DECISION_PLAN_RESERVATION, subject, GANTRY_NONE, 0, 0};
        }
        out->len = want;
        return GANTRY_OK;
    case SAME_SIZE:
        out->needed = out->capacity;
        out->allocations_needed = out->allocations_capacity;
        return GANTRY_BUFFER_FULL;
    case FULL_TWICE:
        out->allocations_needed = out->allocations_capacity + 1;
        return GANTRY_BUFFER_FULL;
    case OVER_LIMIT:
        out->allocations_needed = (uint64_t)1 << 40;
        return GANTRY_BUFFER_FULL;
    case LEN_OVER:
        out->allocations_len = out->allocations_capacity + 1;
        return GANTRY_OK;
    case PROBE:
        return probe(view, out);
    }
    return GANTRY_ERR_INTERNAL;
}

static const GantryPluginV1 VTABLE = {
    .struct_size = sizeof(GantryPluginV1),
    .abi_major = GANTRY_ABI_MAJOR,
    .abi_minor = GANTRY_ABI_MINOR,
    .name = "reserve-lies",
    .version = "0.1.0",
    .capabilities = GANTRY_CAP_PLACE | GANTRY_CAP_RESERVE,
    .create = lies_create,
    .destroy = lies_destroy,
    .place = lies_place,
    .reserve = lies_reserve,
};

const GantryPluginV1 *gantry_plugin_v1(uint16_t host_major, uint16_t host_minor) {
    (void)host_minor;
    return host_major == GANTRY_ABI_MAJOR ? &VTABLE : NULL;
}
