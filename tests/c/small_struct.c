/* Negative test: the vtable's struct_size is 16, smaller than GantryPluginV1. */
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
    .struct_size = 16,
    .abi_major = GANTRY_ABI_MAJOR,
    .abi_minor = GANTRY_ABI_MINOR,
    .name = "small-struct",
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
    (void)host_minor;
    return host_major == GANTRY_ABI_MAJOR ? &VTABLE : NULL;
}
