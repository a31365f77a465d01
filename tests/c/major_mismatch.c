/* Negative test: exports gantry_plugin_v1, but its vtable says abi_major = 2. */
#include <stddef.h>
#include <stdint.h>

#include "gantry.h"

static int32_t place(void *instance, const GantryView *view, GantryOutput *out) {
    (void)instance;
    (void)view;
    out->len = 0;
    return GANTRY_OK;
}

static const GantryPluginV1 VTABLE = {
    .struct_size = sizeof(GantryPluginV1),
    .abi_major = 2,
    .abi_minor = 0,
    .name = "major-mismatch",
    .version = "0.1.0",
    .capabilities = GANTRY_CAP_PLACE,
    .create = NULL,
    .destroy = NULL,
    .admit = NULL,
    .order = NULL,
    .place = place,
    .rebalance = NULL,
};

const GantryPluginV1 *gantry_plugin_v1(uint16_t host_major, uint16_t host_minor) {
    (void)host_major;
    (void)host_minor;
    return &VTABLE;
}
