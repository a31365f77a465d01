/* Negative test: a "v2" plugin that exports only gantry_plugin_v2, so a v1 host finds no entry symbol. */
#include <stddef.h>
#include <stdint.h>

#include "gantry.h"

/* What a future v2 vtable might start with; a v1 host must never look at it. */
typedef struct GantryPluginV2 {
    uint32_t struct_size;
    uint16_t abi_major;
    uint16_t abi_minor;
    const char *name;
    const char *version;
    uint64_t capabilities;
} GantryPluginV2;

static const GantryPluginV2 VTABLE = {
    .struct_size = sizeof(GantryPluginV2),
    .abi_major = 2,
    .abi_minor = 0,
    .name = "wrong-major",
    .version = "2.0.0",
    .capabilities = 0,
};

const GantryPluginV2 *gantry_plugin_v2(uint16_t host_major, uint16_t host_minor);

const GantryPluginV2 *gantry_plugin_v2(uint16_t host_major, uint16_t host_minor) {
    (void)host_minor;
    return host_major == 2 ? &VTABLE : NULL;
}
