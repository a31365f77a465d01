/* sjf: order pending requests shortest expected run time first (unknown run times last). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gantry.h"

typedef struct Item {
    uint64_t key;     /* expected_ms, or UINT64_MAX when unknown */
    uint64_t pos;     /* position in view->pending: keeps the sort stable */
    uint32_t request; /* request index */
} Item;

/* The instance: a scratch array kept between calls. */
typedef struct Sjf {
    Item *items;
    size_t cap;
} Sjf;

static void set_message(GantryOutput *out, const char *msg) {
    size_t n = strlen(msg);
    if (out->message == NULL) {
        return;
    }
    if (n > out->message_capacity) {
        n = (size_t)out->message_capacity;
    }
    memcpy(out->message, msg, n);
    out->message_len = n;
}

static int by_key(const void *a, const void *b) {
    const Item *x = a, *y = b;
    if (x->key != y->key) {
        return x->key < y->key ? -1 : 1;
    }
    return (x->pos > y->pos) - (x->pos < y->pos);
}

static int32_t sjf_create(const char *config, uint64_t config_len, void **instance,
                          GantryOutput *out) {
    (void)config; /* no settings; config is a JSON object, e.g. "{}" */
    (void)config_len;
    Sjf *self = calloc(1, sizeof *self);
    if (self == NULL) {
        set_message(out, "out of memory");
        return GANTRY_ERR_INTERNAL;
    }
    *instance = self;
    return GANTRY_OK;
}

static void sjf_destroy(void *instance) {
    Sjf *self = instance;
    if (self != NULL) {
        free(self->items);
        free(self);
    }
}

static int32_t sjf_order(void *instance, const GantryView *view, GantryOutput *out) {
    /* Sizes: only the 1.0 fields are used, so any 1.x host will do. Comparing with
     * sizeof(GantryView) would refuse every host older than this header. */
    if (out == NULL || out->struct_size < GANTRY_OUTPUT_SIZE_V1_0) {
        return GANTRY_ERR_INVALID_VIEW;
    }
    out->len = 0;
    out->needed = 0;
    out->message_len = 0;
    if (view == NULL || view->struct_size < GANTRY_VIEW_SIZE_V1_0 ||
        view->abi_major != GANTRY_ABI_MAJOR) {
        set_message(out, "unexpected view");
        return GANTRY_ERR_INVALID_VIEW;
    }
    uint64_t n = view->pending_len;
    if (n > out->capacity) { /* one ORDER per pending request: ask for room */
        out->needed = n;
        return GANTRY_BUFFER_FULL;
    }
    Sjf *self = instance;
    if (n > self->cap) {
        Item *items = realloc(self->items, (size_t)n * sizeof *items);
        if (items == NULL) {
            set_message(out, "out of memory");
            return GANTRY_ERR_INTERNAL;
        }
        self->items = items;
        self->cap = (size_t)n;
    }
    for (uint64_t p = 0; p < n; p++) {
        uint32_t r = view->pending[p];
        if (r >= view->requests_len) {
            set_message(out, "pending index out of range");
            return GANTRY_ERR_INVALID_VIEW;
        }
        uint64_t expected = view->requests[r].expected_ms;
        self->items[p] = (Item){expected == 0 ? UINT64_MAX : expected, p, r};
    }
    if (n > 0) {
        qsort(self->items, (size_t)n, sizeof *self->items, by_key);
    }
    for (uint64_t p = 0; p < n; p++) {
        out->decisions[p] =
            (GantryDecision){GANTRY_DECISION_ORDER, self->items[p].request, GANTRY_NONE, 0, 0};
    }
    out->len = n;
    return GANTRY_OK;
}

static const GantryPluginV1 VTABLE = {
    .struct_size = sizeof(GantryPluginV1),
    .abi_major = GANTRY_ABI_MAJOR,
    .abi_minor = GANTRY_ABI_MINOR,
    .name = "sjf",
    .version = "0.1.0",
    .capabilities = GANTRY_CAP_ORDER, /* one bit per non-NULL hook below */
    .create = sjf_create,
    .destroy = sjf_destroy,
    .admit = NULL,
    .order = sjf_order,
    .place = NULL,
    .rebalance = NULL,
};

const GantryPluginV1 *gantry_plugin_v1(uint16_t host_major, uint16_t host_minor) {
    (void)host_minor;
    return host_major == GANTRY_ABI_MAJOR ? &VTABLE : NULL;
}
