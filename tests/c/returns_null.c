/* Negative test: the entry symbol returns NULL for every host. */
#include <stddef.h>
#include <stdint.h>

#include "gantry.h"

const GantryPluginV1 *gantry_plugin_v1(uint16_t host_major, uint16_t host_minor) {
    (void)host_major;
    (void)host_minor;
    return NULL;
}
