/*
 * c-first-fit: a gantry placement plugin written in C against the ABI v1 header gantry.h.
 *
 * For each pending request, in the order of view->pending:
 *   - a gang (GANTRY_REQUEST_GANG) gets all `count` containers in this call or none; with
 *     GANTRY_REQUEST_SAME_RACK_REQUIRED they all go to nodes of one rack;
 *   - any other request gets as many of its `count - placed` containers as fit, first fit (with
 *     GANTRY_REQUEST_SAME_RACK_REQUIRED, on the rack its containers already use, if any).
 * A node is a candidate when it is RUNNING, has every label of the request's node selector, and
 * has room: capacity - allocated - what this call already gave it, for CPU, memory and GPUs.
 *
 * Build:
 *   cc -std=c11 -O2 -shared -fPIC -I sdk/include plugins/examples/c/first_fit.c \
 *      -o /tmp/libgantry_c_first_fit.so
 */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gantry.h"

/* ------------------------------------------------------------------------------------------ */
/* Instance state.                                                                            */
/* ------------------------------------------------------------------------------------------ */

/* Scratch buffers kept between calls so that a call allocates only when the cluster grew. */
typedef struct FirstFit {
    /* Resources given to each node by this call so far (tentative allocations). */
    GantryResources *given;
    size_t given_cap;
    /* Per node: its rack was already tried for the current same-rack gang. */
    uint8_t *rack_tried;
    size_t rack_tried_cap;
    /* Per request: already handled this call (guards against duplicates in view->pending). */
    uint8_t *seen;
    size_t seen_cap;
} FirstFit;

/* Everything one `place` call works with. */
typedef struct Call {
    FirstFit *self;
    const GantryView *view;
    GantryOutput *out;
    /* Room in out->decisions (0 when it is NULL). */
    uint64_t capacity;
    /* Decisions produced so far; only the first `capacity` are written. */
    uint64_t count;
} Call;

/* ------------------------------------------------------------------------------------------ */
/* Output helpers.                                                                            */
/* ------------------------------------------------------------------------------------------ */

/* Copies a NUL-terminated message into the host's message buffer, truncated to its room. */
static void set_message(GantryOutput *out, const char *message) {
    if (out == NULL) {
        return;
    }
    out->message_len = 0;
    if (out->message == NULL || out->message_capacity == 0) {
        return;
    }
    size_t len = strlen(message);
    if ((uint64_t)len > out->message_capacity) {
        len = (size_t)out->message_capacity;
    }
    memcpy(out->message, message, len);
    out->message_len = (uint64_t)len;
}

/* Checks the host's output record and resets its results; NULL when it is unusable. Only the
 * 1.0 fields are written, so a 1.0 output will do (sizeof(GantryOutput) would refuse every host
 * older than this header). */
static GantryOutput *checked_output(GantryOutput *out) {
    if (out == NULL || out->struct_size < GANTRY_OUTPUT_SIZE_V1_0) {
        return NULL;
    }
    out->len = 0;
    out->needed = 0;
    out->message_len = 0;
    return out;
}

/* Appends a decision: written while there is room, always counted. */
static void emit(Call *call, uint32_t kind, uint32_t subject, uint32_t target) {
    if (call->count < call->capacity) {
        GantryDecision *d = &call->out->decisions[call->count];
        d->kind = kind;
        d->subject = subject;
        d->target = target;
        d->reason = 0;
        d->value = 0;
    }
    call->count++;
}

/* ------------------------------------------------------------------------------------------ */
/* View helpers.                                                                              */
/* ------------------------------------------------------------------------------------------ */

static int str_eq(GantryStrRef a, GantryStrRef b) {
    /* Strings are interned: equal strings of one view have equal offsets. */
    return a.offset == b.offset && a.len == b.len;
}

static int range_ok(GantryRange range, uint64_t len) {
    return (uint64_t)range.start + (uint64_t)range.len <= len;
}

/* Whether `node` has every label of `selector` (a range of view->labels, already checked). */
static int node_matches(const GantryView *view, const GantryNode *node, GantryRange selector) {
    for (uint32_t s = 0; s < selector.len; s++) {
        const GantryLabel *want = &view->labels[selector.start + s];
        int found = 0;
        for (uint32_t l = 0; l < node->labels.len && !found; l++) {
            const GantryLabel *have = &view->labels[node->labels.start + l];
            found = str_eq(have->key, want->key) && str_eq(have->value, want->value);
        }
        if (!found) {
            return 0;
        }
    }
    return 1;
}

/* a - b - c, saturating at zero. */
static uint64_t room(uint64_t a, uint64_t b, uint64_t c) {
    if (b >= a) {
        return 0;
    }
    a -= b;
    return c >= a ? 0 : a - c;
}

/* How many containers of `each` still fit on node `i`, at most `limit`. */
static uint64_t fits(const Call *call, uint32_t i, const GantryResources *each, uint64_t limit) {
    const GantryNode *node = &call->view->nodes[i];
    const GantryResources *given = &call->self->given[i];
    uint64_t free_cpu = room(node->capacity.cpu_millis, node->allocated.cpu_millis,
                             given->cpu_millis);
    uint64_t free_mem = room(node->capacity.memory_bytes, node->allocated.memory_bytes,
                             given->memory_bytes);
    uint64_t free_gpu = room(node->capacity.gpus, node->allocated.gpus, given->gpus);
    uint64_t n = limit;
    if (each->cpu_millis > 0 && free_cpu / each->cpu_millis < n) {
        n = free_cpu / each->cpu_millis;
    }
    if (each->memory_bytes > 0 && free_mem / each->memory_bytes < n) {
        n = free_mem / each->memory_bytes;
    }
    if (each->gpus > 0 && free_gpu / each->gpus < n) {
        n = free_gpu / each->gpus;
    }
    return n;
}

/* Whether node `i` may take containers of `req` at all (ignoring room). */
static int eligible(const Call *call, uint32_t i, const GantryRequest *req) {
    const GantryNode *node = &call->view->nodes[i];
    return node->state == GANTRY_NODE_RUNNING && node_matches(call->view, node, req->selector);
}

/* Places up to `limit` containers of request `r` first fit, on nodes of `rack` only when `rack`
 * is not NULL. Returns how many were placed. */
static uint64_t assign(Call *call, uint32_t r, const GantryRequest *req, const GantryStrRef *rack,
                       uint64_t limit) {
    uint64_t left = limit;
    uint32_t nodes = (uint32_t)call->view->nodes_len;
    for (uint32_t i = 0; i < nodes && left > 0; i++) {
        if (rack != NULL && !str_eq(call->view->nodes[i].rack, *rack)) {
            continue;
        }
        if (!eligible(call, i, req)) {
            continue;
        }
        uint64_t k = fits(call, i, &req->resources, left);
        if (k == 0) {
            continue;
        }
        GantryResources *given = &call->self->given[i];
        given->cpu_millis += k * req->resources.cpu_millis;
        given->memory_bytes += k * req->resources.memory_bytes;
        given->gpus += (uint32_t)(k * req->resources.gpus);
        for (uint64_t c = 0; c < k; c++) {
            emit(call, GANTRY_DECISION_PLACE, r, i);
        }
        left -= k;
    }
    return limit - left;
}

/* How many of `need` containers of `req` would fit, on nodes of `rack` only when not NULL; marks
 * the nodes of `rack` in rack_tried. */
static uint64_t capacity_for(Call *call, const GantryRequest *req, const GantryStrRef *rack,
                             uint32_t from, uint64_t need) {
    uint64_t total = 0;
    uint32_t nodes = (uint32_t)call->view->nodes_len;
    for (uint32_t i = from; i < nodes; i++) {
        if (rack != NULL) {
            if (!str_eq(call->view->nodes[i].rack, *rack)) {
                continue;
            }
            call->self->rack_tried[i] = 1;
        }
        if (total < need && eligible(call, i, req)) {
            total += fits(call, i, &req->resources, need - total);
        }
        if (total >= need && rack == NULL) {
            break;
        }
    }
    return total;
}

/* A gang: all `count` containers or none. */
static void place_gang(Call *call, uint32_t r, const GantryRequest *req) {
    uint64_t need = req->count;
    if (need == 0 || req->placed != 0) {
        return; /* a gang is placed whole; nothing to do (or not ours to fix) */
    }
    if (!(req->flags & GANTRY_REQUEST_SAME_RACK_REQUIRED)) {
        if (capacity_for(call, req, NULL, 0, need) >= need) {
            assign(call, r, req, NULL, need);
        }
        return;
    }
    uint32_t nodes = (uint32_t)call->view->nodes_len;
    if (nodes == 0) {
        return;
    }
    memset(call->self->rack_tried, 0, nodes);
    for (uint32_t i = 0; i < nodes; i++) {
        const GantryNode *node = &call->view->nodes[i];
        /* Racks in order of their first node; nodes of unknown rack are on no rack. */
        if (call->self->rack_tried[i] || node->rack.len == 0) {
            continue;
        }
        GantryStrRef rack = node->rack;
        if (capacity_for(call, req, &rack, i, need) >= need) {
            assign(call, r, req, &rack, need);
            return;
        }
    }
}

/* The rack that the live containers of request `r` are on, or NULL if it has none. */
static const GantryStrRef *rack_in_use(const Call *call, uint32_t r) {
    const GantryView *view = call->view;
    for (uint64_t c = 0; c < view->containers_len; c++) {
        const GantryContainer *container = &view->containers[c];
        if (container->request == r && container->node < view->nodes_len) {
            return &view->nodes[container->node].rack;
        }
    }
    return NULL;
}

/* Not a gang: as many of the missing containers as fit. */
static void place_each(Call *call, uint32_t r, const GantryRequest *req) {
    if (req->placed >= req->count) {
        return;
    }
    uint64_t need = (uint64_t)req->count - req->placed;
    if (!(req->flags & GANTRY_REQUEST_SAME_RACK_REQUIRED)) {
        assign(call, r, req, NULL, need);
        return;
    }
    const GantryStrRef *rack = rack_in_use(call, r);
    uint32_t nodes = (uint32_t)call->view->nodes_len;
    for (uint32_t i = 0; rack == NULL && i < nodes; i++) {
        /* No container yet: the rack of the first node where one fits. */
        if (call->view->nodes[i].rack.len > 0 && eligible(call, i, req) &&
            fits(call, i, &req->resources, 1) > 0) {
            rack = &call->view->nodes[i].rack;
        }
    }
    if (rack != NULL && rack->len > 0) {
        assign(call, r, req, rack, need);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Validation.                                                                                */
/* ------------------------------------------------------------------------------------------ */

/* Checks the parts of the view this plugin reads; writes a message and returns 0 if broken. It
 * reads only 1.0 fields, so any 1.x host's view will do. */
static int view_ok(const GantryView *view, GantryOutput *out) {
    char message[160];
    if (view->struct_size < GANTRY_VIEW_SIZE_V1_0) {
        snprintf(message, sizeof message, "view struct_size %u is smaller than %u",
                 (unsigned)view->struct_size, (unsigned)GANTRY_VIEW_SIZE_V1_0);
        set_message(out, message);
        return 0;
    }
    if (view->abi_major != GANTRY_ABI_MAJOR) {
        snprintf(message, sizeof message, "view has ABI major %u, this plugin speaks %u",
                 (unsigned)view->abi_major, (unsigned)GANTRY_ABI_MAJOR);
        set_message(out, message);
        return 0;
    }
    if ((view->nodes == NULL && view->nodes_len > 0) ||
        (view->labels == NULL && view->labels_len > 0) ||
        (view->requests == NULL && view->requests_len > 0) ||
        (view->containers == NULL && view->containers_len > 0) ||
        (view->pending == NULL && view->pending_len > 0)) {
        set_message(out, "view has a NULL array with a non-zero length");
        return 0;
    }
    if (view->nodes_len >= GANTRY_NONE || view->requests_len >= GANTRY_NONE) {
        set_message(out, "view has more nodes or requests than u32 indexes can name");
        return 0;
    }
    for (uint64_t i = 0; i < view->nodes_len; i++) {
        if (!range_ok(view->nodes[i].labels, view->labels_len)) {
            snprintf(message, sizeof message, "node %llu: labels range is out of bounds",
                     (unsigned long long)i);
            set_message(out, message);
            return 0;
        }
    }
    for (uint64_t p = 0; p < view->pending_len; p++) {
        uint32_t r = view->pending[p];
        if (r >= view->requests_len) {
            snprintf(message, sizeof message, "pending[%llu] = %u is not a request index",
                     (unsigned long long)p, (unsigned)r);
            set_message(out, message);
            return 0;
        }
        if (!range_ok(view->requests[r].selector, view->labels_len)) {
            snprintf(message, sizeof message, "request %u: selector range is out of bounds",
                     (unsigned)r);
            set_message(out, message);
            return 0;
        }
    }
    return 1;
}

/* Grows the scratch buffers to `nodes` nodes and `requests` requests; 0 if out of memory. */
static int reserve(FirstFit *self, size_t nodes, size_t requests) {
    if (nodes > self->given_cap) {
        GantryResources *given = realloc(self->given, nodes * sizeof *given);
        if (given == NULL) {
            return 0;
        }
        self->given = given;
        self->given_cap = nodes;
    }
    if (nodes > self->rack_tried_cap) {
        uint8_t *rack_tried = realloc(self->rack_tried, nodes);
        if (rack_tried == NULL) {
            return 0;
        }
        self->rack_tried = rack_tried;
        self->rack_tried_cap = nodes;
    }
    if (requests > self->seen_cap) {
        uint8_t *seen = realloc(self->seen, requests);
        if (seen == NULL) {
            return 0;
        }
        self->seen = seen;
        self->seen_cap = requests;
    }
    return 1;
}

/* ------------------------------------------------------------------------------------------ */
/* Hooks.                                                                                     */
/* ------------------------------------------------------------------------------------------ */

static int32_t ff_create(const char *config, uint64_t config_len, void **instance,
                         GantryOutput *out) {
    /* Any configuration is accepted; this plugin has no settings. */
    (void)config;
    (void)config_len;
    out = checked_output(out);
    if (instance == NULL) {
        set_message(out, "create: instance pointer is NULL");
        return GANTRY_ERR_INVALID_VIEW;
    }
    FirstFit *self = calloc(1, sizeof *self);
    if (self == NULL) {
        set_message(out, "create: out of memory");
        return GANTRY_ERR_INTERNAL;
    }
    *instance = self;
    return GANTRY_OK;
}

static void ff_destroy(void *instance) {
    FirstFit *self = instance;
    if (self == NULL) {
        return;
    }
    free(self->given);
    free(self->rack_tried);
    free(self->seen);
    free(self);
}

static int32_t ff_place(void *instance, const GantryView *view, GantryOutput *out) {
    out = checked_output(out);
    if (out == NULL) {
        return GANTRY_ERR_INVALID_VIEW;
    }
    if (instance == NULL || view == NULL) {
        set_message(out, "place: instance or view pointer is NULL");
        return GANTRY_ERR_INVALID_VIEW;
    }
    if (!view_ok(view, out)) {
        return GANTRY_ERR_INVALID_VIEW;
    }
    FirstFit *self = instance;
    size_t nodes = (size_t)view->nodes_len;
    size_t requests = (size_t)view->requests_len;
    if (!reserve(self, nodes, requests)) {
        set_message(out, "place: out of memory");
        return GANTRY_ERR_INTERNAL;
    }
    if (nodes > 0) {
        memset(self->given, 0, nodes * sizeof *self->given);
    }
    if (requests > 0) {
        memset(self->seen, 0, requests);
    }

    Call call = {self, view, out, out->decisions != NULL ? out->capacity : 0, 0};
    for (uint64_t p = 0; p < view->pending_len; p++) {
        uint32_t r = view->pending[p];
        if (self->seen[r]) {
            continue;
        }
        self->seen[r] = 1;
        const GantryRequest *req = &view->requests[r];
        if (req->flags & GANTRY_REQUEST_GANG) {
            place_gang(&call, r, req);
        } else {
            place_each(&call, r, req);
        }
    }

    /* The result depends on the view alone, so a retry with a larger buffer gets the same. */
    if (call.count > call.capacity) {
        out->needed = call.count;
        return GANTRY_BUFFER_FULL;
    }
    out->len = call.count;
    return GANTRY_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Entry symbol.                                                                              */
/* ------------------------------------------------------------------------------------------ */

static const GantryPluginV1 VTABLE = {
    .struct_size = sizeof(GantryPluginV1),
    .abi_major = GANTRY_ABI_MAJOR,
    .abi_minor = GANTRY_ABI_MINOR,
    .name = "c-first-fit",
    .version = "0.1.0",
    .capabilities = GANTRY_CAP_PLACE,
    .create = ff_create,
    .destroy = ff_destroy,
    .admit = NULL,
    .order = NULL,
    .place = ff_place,
    .rebalance = NULL,
};

const GantryPluginV1 *gantry_plugin_v1(uint16_t host_major, uint16_t host_minor) {
    (void)host_minor;
    return host_major == GANTRY_ABI_MAJOR ? &VTABLE : NULL;
}
