/* Negative test: a valid shared library that exports an unrelated function and no gantry symbol. */
#include <stdint.h>

int32_t not_a_gantry_plugin(int32_t x);

int32_t not_a_gantry_plugin(int32_t x) {
    return x + 1;
}
