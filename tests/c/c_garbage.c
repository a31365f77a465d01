/* Negative test: a well-formed plugin whose place writes invalid decisions and whose order fails with -2. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gantry.h"

static void set_message(GantryOutput *out, const char *message) {
    size_t len = strlen(message);
    if (out->message == NULL) {
        out->message_len = 0;
        return;
    }
    if ((uint64_t)len > out->message_capacity) {
        len = (size_t)out->message_capacity;
    }
    memcpy(out->message, message, len);
    out->message_len = (uint64_t)len;
}

static int32_t create(const char *config, uint64_t config_len, void **instance,
                      GantryOutput *out) {
    (void)config;
    (void)config_len;
    (void)out;
    int *state = malloc(sizeof *state);
    if (state == NULL) {
        return GANTRY_ERR_INTERNAL;
    }
    *state = 0;
    *instance = state;
    return GANTRY_OK;
}

static void destroy(void *instance) {
    free(instance);
}

static int32_t order(void *instance, const GantryView *view, GantryOutput *out) {
    (void)instance;
    (void)view;
    out->len = 0;
    out->needed = 0;
    set_message(out, "c plugin failed on purpose");
    return -2;
}

/* Three decisions a host must reject: an unknown kind, a PLACE on a node that does not exist, and
 * a PLACE for a request index past the end of view->requests. */
static int32_t place(void *instance, const GantryView *view, GantryOutput *out) {
    (void)instance;
    uint32_t request = view->pending_len > 0 ? view->pending[0] : 0;
    GantryDecision garbage[3] = {
        {.kind = 999, .subject = request, .target = 0, .reason = 0, .value = 0},
        {.kind = GANTRY_DECISION_PLACE, .subject = request, .target = 0xFFFFFFF0u,
         .reason = 0, .value = 0},
        {.kind = GANTRY_DECISION_PLACE, .subject = (uint32_t)view->requests_len,
         .target = 0, .reason = 0, .value = 0},
    };
    out->len = 0;
    out->needed = 0;
    out->message_len = 0;
    if (out->decisions == NULL || out->capacity < 3) {
        out->needed = 3;
        return GANTRY_BUFFER_FULL;
    }
    memcpy(out->decisions, garbage, sizeof garbage);
    out->len = 3;
    return GANTRY_OK;
}

static const GantryPluginV1 VTABLE = {
    .struct_size = sizeof(GantryPluginV1),
    .abi_major = GANTRY_ABI_MAJOR,
    .abi_minor = GANTRY_ABI_MINOR,
    .name = "c-garbage",
    .version = "0.1.0",
    .capabilities = GANTRY_CAP_ORDER | GANTRY_CAP_PLACE,
    .create = create,
    .destroy = destroy,
    .admit = NULL,
    .order = order,
    .place = place,
    .rebalance = NULL,
};

const GantryPluginV1 *gantry_plugin_v1(uint16_t host_major, uint16_t host_minor) {
    (void)host_minor;
    return host_major == GANTRY_ABI_MAJOR ? &VTABLE : NULL;
}
