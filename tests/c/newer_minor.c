/* A plugin built for a minor newer than the host's (abi_minor = GANTRY_ABI_MINOR + 1, with one
 * more hook slot at the end of its vtable), whose hook, like a C plugin compiled against that
 * newer header, insists on a view at least as long as it was compiled for: it loads, and fails
 * every call on this host. */
#include <stddef.h>
#include <stdint.h>

#include "gantry.h"

/* What the newer minor's view would be: 16 more bytes (one more array). */
#define NEWER_VIEW_SIZE (sizeof(GantryView) + 16)

static int32_t place(void *instance, const GantryView *view, GantryOutput *out) {
    (void)instance;
    out->len = 0;
    if (view->struct_size < NEWER_VIEW_SIZE) {
        return GANTRY_ERR_INVALID_VIEW;
    }
    return GANTRY_OK;
}

typedef struct NewerVtable {
    GantryPluginV1 v1;
    GantryHookFn future_hook;
} NewerVtable;

static const NewerVtable VTABLE = {
    .v1 =
        {
            .struct_size = sizeof(NewerVtable),
            .abi_major = GANTRY_ABI_MAJOR,
            .abi_minor = GANTRY_ABI_MINOR + 1,
            .name = "newer-minor",
            .version = "0.1.0",
            .capabilities = GANTRY_CAP_PLACE,
            .create = NULL,
            .destroy = NULL,
            .admit = NULL,
            .order = NULL,
            .place = place,
            .rebalance = NULL,
        },
    .future_hook = NULL,
};

const GantryPluginV1 *gantry_plugin_v1(uint16_t host_major, uint16_t host_minor) {
    (void)host_minor;
    return host_major == GANTRY_ABI_MAJOR ? &VTABLE.v1 : NULL;
}
