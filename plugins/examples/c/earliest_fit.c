/*
 * c-earliest-fit: a gantry reservation planner written in C against the ABI header gantry.h
 * (ABI 1.3, the `reserve` hook), independent of the Rust Rayon planner.
 *
 * The plan. Every accepted reservation's allocation is in view->allocations: pieces of `bundles`
 * bundles of one atom over [start_ms, end_ms). Together they must fit view->plan_capacity at every
 * instant from view->now_ms on. This plugin keeps that usage as a step function of time (a
 * profile) and places new work where the profile has room.
 *
 * ADMIT and UPDATE (plan reservation view->reserve_subject): the subject's definition is a tree of
 * view->rdl_nodes (its root wrapped by the host in window(arrival, deadline, ...)). The plugin
 * walks it from max(now, arrival):
 *   - atom(b, g, h, l, w): one rectangle of k bundles for max(l, ceil(w / k)) ms, where k is the
 *     largest multiple of g, at most h, whose k bundles fit plan_capacity; placed at the earliest
 *     instant (not before the atom's earliest start) at which the profile - every accepted
 *     allocation except the subject's own, plus what this call placed already - has room for it
 *     throughout, and that ends within the atom's window (the intersection of the windows above
 *     it). When no such instant exists, k is halved (rounded to whole gangs of g) and tried again,
 *     down to one gang;
 *   - window(s, e, x): x within [s, e);
 *   - order(x1, x2, ...): each part starts when the previous part's last piece ends;
 *   - all(x1, x2, ...): every part, each from the same earliest start;
 *   - any(x1, x2, ...): the first part that fits (what a part that did not fit placed is undone).
 * If everything fits, the answer is PLAN_RESERVATION with one piece per placed atom; otherwise
 * REJECT_RESERVATION with a reason code:
 *   EF_REASON_NO_ROOM   (1) some atom finds no room within its window;
 *   EF_REASON_TOO_BIG   (2) one gang of some atom (g bundles) exceeds plan_capacity by itself;
 *   EF_REASON_INVALID   (3) an atom has g = 0, g > h or w = 0 (the host never sends one).
 *
 * REPLAN (the capacity dropped and the accepted allocations overcommit it from now on): the
 * accepted reservations that hold anything from now on are given up in order - lowest priority
 * first, newest (accepted_ms) first among equals - until the rest fits from now on (a binary
 * search over that order: giving up more never hurts). Then each given-up reservation that has
 * not started (no piece before now), oldest first, is planned again as in ADMIT around what is
 * kept: if it fits it is moved (PLAN_RESERVATION), else it is given up (REJECT_RESERVATION,
 * EF_REASON_REPLANNED (4)). A reservation that has started is given up.
 *
 * OPTIMIZE: no change (an empty answer).
 *
 * The answer depends on the view alone, so the retry after GANTRY_BUFFER_FULL gets the same.
 * The plugin checks view->struct_size and out->struct_size before it reads or writes a 1.3 field,
 * and its entry symbol returns NULL for a host older than ABI 1.3 (which could not call it).
 *
 * Build:
 *   cc -std=c11 -O2 -shared -fPIC -I sdk/include plugins/examples/c/earliest_fit.c \
 *      -o /tmp/libgantry_c_earliest_fit.so
 */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gantry.h"

#define EF_REASON_NO_ROOM 1u
#define EF_REASON_TOO_BIG 2u
#define EF_REASON_INVALID 3u
#define EF_REASON_REPLANNED 4u

/* Deepest definition the walk follows: far beyond the RDL's own limit of 15, and a guard against
 * a view whose children ranges loop. */
#define MAX_DEPTH 64

/* ---- Resources, saturating. ---- */

static uint64_t sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

static uint64_t sat_mul(uint64_t a, uint64_t b) {
    return (a != 0 && b > UINT64_MAX / a) ? UINT64_MAX : a * b;
}

static GantryResources res_add(GantryResources a, GantryResources b) {
    GantryResources r = {sat_add(a.cpu_millis, b.cpu_millis), sat_add(a.memory_bytes, b.memory_bytes),
                         0, 0};
    uint64_t gpus = (uint64_t)a.gpus + b.gpus;
    r.gpus = gpus > UINT32_MAX ? UINT32_MAX : (uint32_t)gpus;
    return r;
}

/* `n` bundles of `b`. */
static GantryResources res_times(GantryResources b, uint64_t n) {
    GantryResources r = {sat_mul(b.cpu_millis, n), sat_mul(b.memory_bytes, n), 0, 0};
    uint64_t gpus = sat_mul(b.gpus, n);
    r.gpus = gpus > UINT32_MAX ? UINT32_MAX : (uint32_t)gpus;
    return r;
}

static int res_fits(GantryResources a, GantryResources cap) {
    return a.cpu_millis <= cap.cpu_millis && a.memory_bytes <= cap.memory_bytes && a.gpus <= cap.gpus;
}

/* How many units of `unit` fit in `cap` (UINT64_MAX when `unit` is zero). */
static uint64_t res_count(GantryResources unit, GantryResources cap) {
    uint64_t u[3] = {unit.cpu_millis, unit.memory_bytes, unit.gpus};
    uint64_t c[3] = {cap.cpu_millis, cap.memory_bytes, cap.gpus};
    uint64_t n = UINT64_MAX;
    for (int i = 0; i < 3; i++) {
        n = u[i] > 0 && c[i] / u[i] < n ? c[i] / u[i] : n;
    }
    return n;
}

/* Grows `*buf` (`*cap` elements of `size` bytes) to at least `n` elements; 0 if out of memory. */
static int grow(void **buf, size_t *cap, size_t n, size_t size) {
    if (n <= *cap) {
        return 1;
    }
    size_t c = *cap < 16 ? 16 : *cap;
    while (c < n) {
        c *= 2;
    }
    void *p = realloc(*buf, c * size);
    if (p == NULL) {
        return 0;
    }
    *buf = p;
    *cap = c;
    return 1;
}

/* ---- The profile: usage as a step function of time. Segment k holds `use` from its `t` to
 * the next segment's (the last one forever); segs[0].t is 0. ---- */

typedef struct Seg {
    uint64_t t;
    GantryResources use;
} Seg;

typedef struct Profile {
    Seg *segs;
    size_t len, cap;
} Profile;

static int profile_copy(Profile *to, const Profile *from) {
    if (!grow((void **)&to->segs, &to->cap, from->len, sizeof *to->segs)) {
        return 0;
    }
    memcpy(to->segs, from->segs, from->len * sizeof *from->segs);
    to->len = from->len;
    return 1;
}

/* The segment that contains `t`. */
static size_t profile_find(const Profile *p, uint64_t t) {
    size_t lo = 0, hi = p->len;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->segs[mid].t <= t) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return lo;
}

/* The segment that starts at `t`, splitting the one that contains it; SIZE_MAX if out of memory. */
static size_t profile_split(Profile *p, uint64_t t) {
    size_t k = profile_find(p, t);
    if (p->segs[k].t == t) {
        return k;
    }
    if (!grow((void **)&p->segs, &p->cap, p->len + 1, sizeof *p->segs)) {
        return SIZE_MAX;
    }
    memmove(&p->segs[k + 2], &p->segs[k + 1], (p->len - k - 1) * sizeof *p->segs);
    p->segs[k + 1] = (Seg){t, p->segs[k].use};
    p->len++;
    return k + 1;
}

/* Adds `r` over [start, end); 0 if out of memory. */
static int profile_add(Profile *p, uint64_t start, uint64_t end, GantryResources r) {
    size_t i = profile_split(p, start);
    size_t j = profile_split(p, end);
    if (i == SIZE_MAX || j == SIZE_MAX) {
        return 0;
    }
    for (size_t k = i; k < j; k++) {
        p->segs[k].use = res_add(p->segs[k].use, r);
    }
    return 1;
}

/* Whether the profile fits `cap` at every instant from `now` on. */
static int profile_fits_from(const Profile *p, uint64_t now, GantryResources cap) {
    for (size_t k = 0; k < p->len; k++) {
        int reaches_now = k + 1 == p->len || p->segs[k + 1].t > now;
        if (reaches_now && !res_fits(p->segs[k].use, cap)) {
            return 0;
        }
    }
    return 1;
}

/* The earliest t >= from with t + d <= until at which `r` more fits `cap` throughout [t, t + d). */
static int profile_earliest(const Profile *p, uint64_t from, uint64_t until, uint64_t d,
                            GantryResources r, GantryResources cap, uint64_t *at) {
    uint64_t t = from;
    size_t k = profile_find(p, t);
    for (;;) {
        if (t > until || until - t < d) {
            return 0;
        }
        uint64_t end = t + d;
        size_t j = k;
        while (j < p->len && p->segs[j].t < end && res_fits(res_add(p->segs[j].use, r), cap)) {
            j++;
        }
        if (j == p->len || p->segs[j].t >= end) {
            *at = t;
            return 1;
        }
        if (j + 1 == p->len) {
            return 0; /* the crowded segment lasts forever */
        }
        k = j + 1;
        t = p->segs[k].t;
    }
}

/* ---- Instance state. ---- */

/* A change of usage at time t, for building a profile in one sweep. */
typedef struct Event {
    uint64_t t;
    GantryResources r;
    int add;
} Event;

/* A reservation in the order REPLAN gives them up. */
typedef struct Candidate {
    int32_t priority;
    uint64_t accepted_ms;
    uint32_t index;
} Candidate;

/* A piece this call placed, with the resources it holds. */
typedef struct Placed {
    GantryAllocation piece;
    GantryResources use;
} Placed;

/* Scratch buffers kept between calls, so that a call allocates only when the plan grew. */
typedef struct EarliestFit {
    Profile base; /* the usage this call keeps */
    Profile work; /* base + what this call placed */
    Event *events;
    size_t events_cap;
    Placed *placed;
    size_t placed_len, placed_cap;
    GantryDecision *decisions;
    size_t decisions_len, decisions_cap;
    size_t *atom_first; /* per reservation: where its atoms start in atom_node */
    size_t atom_first_cap;
    uint32_t *atom_node; /* per atom of every reservation: the index of its node */
    size_t atom_node_cap;
    uint8_t *given_up; /* per reservation (REPLAN) */
    size_t given_up_cap;
    Candidate *candidates;
    size_t candidates_cap;
} EarliestFit;

/* Everything one call works with. */
typedef struct Call {
    EarliestFit *self;
    const GantryView *view;
    uint32_t reservation; /* the one being planned */
    uint32_t reason;      /* why its last attempt failed */
} Call;

enum { NO_FIT = 0, FIT = 1, OUT_OF_MEMORY = -1 };

/* ---- Output helpers. ---- */

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

/* Checks the host's output record and resets its results. NULL when it cannot carry even a
 * message; *has_pieces says whether it has the ABI 1.3 allocation fields. */
static GantryOutput *checked_output(GantryOutput *out, int *has_pieces) {
    *has_pieces = 0;
    if (out == NULL || out->struct_size < GANTRY_OUTPUT_SIZE_V1_0) {
        return NULL;
    }
    out->len = 0;
    out->needed = 0;
    out->message_len = 0;
    if (out->struct_size >= sizeof(GantryOutput)) {
        out->allocations_len = 0;
        out->allocations_needed = 0;
        *has_pieces = 1;
    }
    return out;
}

static int push_decision(Call *c, uint32_t kind, uint32_t subject, uint32_t reason) {
    EarliestFit *self = c->self;
    if (!grow((void **)&self->decisions, &self->decisions_cap, self->decisions_len + 1,
              sizeof *self->decisions)) {
        return 0;
    }
    self->decisions[self->decisions_len++] = (GantryDecision){kind, subject, GANTRY_NONE, reason, 0};
    return 1;
}

static int push_piece(Call *c, uint32_t atom, uint64_t start, uint64_t end, uint64_t bundles,
                      GantryResources use) {
    EarliestFit *self = c->self;
    if (!grow((void **)&self->placed, &self->placed_cap, self->placed_len + 1, sizeof *self->placed)) {
        return 0;
    }
    GantryAllocation piece = {c->reservation, atom, start, end, bundles};
    self->placed[self->placed_len++] = (Placed){piece, use};
    return 1;
}

/* ---- The view: checks, and an index of every reservation's atoms. ---- */

static int range_ok(GantryRange range, uint64_t len) {
    return (uint64_t)range.start + (uint64_t)range.len <= len;
}

/* Walks the definition below node `index`, recording each atom's node in `table` (`atoms`
 * entries); 0 when the tree is malformed. `*budget` bounds the nodes visited (a loop). */
static int index_node(const GantryView *view, uint32_t index, int depth, uint64_t *budget,
                      uint32_t *table, uint32_t atoms) {
    if (depth > MAX_DEPTH || *budget == 0 || index >= view->rdl_nodes_len) {
        return 0;
    }
    (*budget)--;
    const GantryRdlNode *n = &view->rdl_nodes[index];
    if (!range_ok(n->children, view->rdl_nodes_len)) {
        return 0;
    }
    switch (n->kind) {
    case GANTRY_RDL_ATOM:
        if (n->children.len != 0 || n->atom >= atoms || table[n->atom] != GANTRY_NONE) {
            return 0;
        }
        table[n->atom] = index;
        return 1;
    case GANTRY_RDL_WINDOW:
        if (n->children.len != 1) {
            return 0;
        }
        break;
    case GANTRY_RDL_ORDER:
    case GANTRY_RDL_ALL:
    case GANTRY_RDL_ANY:
        if (n->children.len == 0) {
            return 0;
        }
        break;
    default:
        return 0;
    }
    for (uint32_t k = 0; k < n->children.len; k++) {
        if (!index_node(view, n->children.start + k, depth + 1, budget, table, atoms)) {
            return 0;
        }
    }
    return 1;
}

/* Checks what this plugin reads and indexes the atoms; writes `message` and returns 0 if the view
 * is broken, -1 if out of memory. */
static int view_ok(Call *c, char *message, size_t message_size) {
    const GantryView *view = c->view;
    EarliestFit *self = c->self;
    if (view->struct_size < sizeof(GantryView) || view->abi_major != GANTRY_ABI_MAJOR) {
        snprintf(message, message_size, "view of ABI %u (%u bytes): this plugin needs 1.3 (%zu bytes)",
                 (unsigned)view->abi_major, (unsigned)view->struct_size, sizeof(GantryView));
        return 0;
    }
    if ((view->reservations == NULL && view->reservations_len > 0) ||
        (view->reservation_details == NULL && view->reservation_details_len > 0) ||
        (view->rdl_nodes == NULL && view->rdl_nodes_len > 0) ||
        (view->allocations == NULL && view->allocations_len > 0)) {
        snprintf(message, message_size, "view has a NULL array with a non-zero length");
        return 0;
    }
    uint64_t r_len = view->reservation_details_len;
    if (r_len != view->reservations_len || r_len >= GANTRY_NONE || view->rdl_nodes_len >= GANTRY_NONE) {
        snprintf(message, message_size, "view has %llu reservation details for %llu reservations",
                 (unsigned long long)r_len, (unsigned long long)view->reservations_len);
        return 0;
    }
    size_t atoms = 0;
    if (!grow((void **)&self->atom_first, &self->atom_first_cap, (size_t)r_len + 1,
              sizeof *self->atom_first)) {
        return -1;
    }
    for (uint64_t r = 0; r < r_len; r++) {
        self->atom_first[r] = atoms;
        atoms += view->reservation_details[r].atoms;
    }
    self->atom_first[r_len] = atoms;
    if (!grow((void **)&self->atom_node, &self->atom_node_cap, atoms, sizeof *self->atom_node)) {
        return -1;
    }
    for (uint64_t r = 0; r < r_len; r++) {
        const GantryReservationDetail *d = &view->reservation_details[r];
        uint32_t *table = &self->atom_node[self->atom_first[r]];
        for (uint32_t a = 0; a < d->atoms; a++) {
            table[a] = GANTRY_NONE;
        }
        uint64_t budget = view->rdl_nodes_len;
        int ok = range_ok(d->allocation, view->allocations_len) &&
                 index_node(view, d->definition, 0, &budget, table, d->atoms);
        for (uint32_t a = 0; ok && a < d->atoms; a++) {
            ok = table[a] != GANTRY_NONE;
        }
        if (!ok) {
            snprintf(message, message_size, "reservation %llu: its definition or allocation is malformed",
                     (unsigned long long)r);
            return 0;
        }
    }
    for (uint64_t i = 0; i < view->allocations_len; i++) {
        const GantryAllocation *a = &view->allocations[i];
        if (a->reservation >= r_len || a->atom >= view->reservation_details[a->reservation].atoms ||
            a->start_ms >= a->end_ms) {
            snprintf(message, message_size, "allocation piece %llu is malformed", (unsigned long long)i);
            return 0;
        }
    }
    return 1;
}

/* The node of atom `atom` of reservation `r` (both checked by view_ok). */
static const GantryRdlNode *atom_node(const Call *c, uint32_t r, uint32_t atom) {
    return &c->view->rdl_nodes[c->self->atom_node[c->self->atom_first[r] + atom]];
}

/* ---- Building the usage. ---- */

static int cmp_event(const void *a, const void *b) {
    uint64_t x = ((const Event *)a)->t, y = ((const Event *)b)->t;
    return (x > y) - (x < y);
}

/* self->base = every accepted piece except reservation `skip`'s and those of reservations marked
 * in `given_up` (when not NULL); self->work = a copy; nothing placed yet. 0 if out of memory. */
static int build_base(Call *c, const uint8_t *given_up, uint32_t skip) {
    EarliestFit *self = c->self;
    const GantryView *view = c->view;
    if (!grow((void **)&self->events, &self->events_cap, 2 * (size_t)view->allocations_len + 1,
              sizeof *self->events)) {
        return 0;
    }
    size_t n = 0;
    for (uint64_t i = 0; i < view->allocations_len; i++) {
        const GantryAllocation *a = &view->allocations[i];
        if (a->reservation == skip || (given_up != NULL && given_up[a->reservation])) {
            continue;
        }
        GantryResources r = res_times(atom_node(c, a->reservation, a->atom)->bundle, a->bundles);
        self->events[n++] = (Event){a->start_ms, r, 1};
        self->events[n++] = (Event){a->end_ms, r, 0};
    }
    qsort(self->events, n, sizeof *self->events, cmp_event);
    Profile *p = &self->base;
    if (!grow((void **)&p->segs, &p->cap, n + 1, sizeof *p->segs)) {
        return 0;
    }
    GantryResources cur = {0, 0, 0, 0};
    p->len = 1;
    p->segs[0] = (Seg){0, cur};
    for (size_t i = 0; i < n;) {
        uint64_t t = self->events[i].t;
        for (; i < n && self->events[i].t == t; i++) {
            GantryResources r = self->events[i].r;
            if (self->events[i].add) {
                cur = res_add(cur, r);
            } else { /* its start was added at an earlier time: no underflow */
                cur.cpu_millis -= r.cpu_millis;
                cur.memory_bytes -= r.memory_bytes;
                cur.gpus -= r.gpus;
            }
        }
        if (p->segs[p->len - 1].t == t) {
            p->segs[p->len - 1].use = cur;
        } else {
            p->segs[p->len++] = (Seg){t, cur};
        }
    }
    self->placed_len = 0;
    return profile_copy(&self->work, &self->base);
}

/* Undoes what was placed after the first `mark` pieces: work = base + placed[0 .. mark). */
static int rollback(Call *c, size_t mark) {
    EarliestFit *self = c->self;
    self->placed_len = mark;
    if (!profile_copy(&self->work, &self->base)) {
        return 0;
    }
    for (size_t i = 0; i < mark; i++) {
        const Placed *p = &self->placed[i];
        if (!profile_add(&self->work, p->piece.start_ms, p->piece.end_ms, p->use)) {
            return 0;
        }
    }
    return 1;
}

/* ---- Planning one reservation. ---- */

/* One rectangle for atom `n`, within [lo, hi), not before `from`; its end in *finish. */
static int place_atom(Call *c, const GantryRdlNode *n, uint64_t lo, uint64_t hi, uint64_t from,
                      uint64_t *finish) {
    GantryResources cap = c->view->plan_capacity;
    uint64_t g = n->min_parallel, h = n->max_parallel;
    if (g == 0 || g > h || n->work == 0) {
        c->reason = EF_REASON_INVALID;
        return NO_FIT;
    }
    uint64_t gangs = h / g;
    uint64_t fit = res_count(res_times(n->bundle, g), cap);
    if (fit < gangs) {
        gangs = fit;
    }
    if (gangs == 0) {
        c->reason = EF_REASON_TOO_BIG;
        return NO_FIT;
    }
    uint64_t start = from > lo ? from : lo;
    for (uint64_t k = gangs; k > 0; k /= 2) {
        uint64_t bundles = k * g; /* <= h: no overflow */
        uint64_t d = n->work / bundles + (n->work % bundles != 0);
        if (d < n->min_lease_ms) {
            d = n->min_lease_ms;
        }
        GantryResources use = res_times(n->bundle, bundles);
        uint64_t at;
        if (profile_earliest(&c->self->work, start, hi, d, use, cap, &at)) {
            if (!profile_add(&c->self->work, at, at + d, use) ||
                !push_piece(c, n->atom, at, at + d, bundles, use)) {
                return OUT_OF_MEMORY;
            }
            *finish = at + d;
            return FIT;
        }
    }
    c->reason = EF_REASON_NO_ROOM;
    return NO_FIT;
}

/* Places node `index` (checked by view_ok) within [lo, hi), not before `from`. */
static int place_node(Call *c, uint32_t index, uint64_t lo, uint64_t hi, uint64_t from,
                      uint64_t *finish) {
    const GantryRdlNode *n = &c->view->rdl_nodes[index];
    uint32_t first = n->children.start;
    int rc = NO_FIT;
    switch (n->kind) {
    case GANTRY_RDL_ATOM:
        return place_atom(c, n, lo, hi, from, finish);
    case GANTRY_RDL_WINDOW: {
        uint64_t s = n->start_ms > lo ? n->start_ms : lo;
        uint64_t e = n->end_ms < hi ? n->end_ms : hi;
        if (s >= e) {
            c->reason = EF_REASON_NO_ROOM;
            return NO_FIT;
        }
        return place_node(c, first, s, e, from, finish);
    }
    case GANTRY_RDL_ORDER: {
        uint64_t cur = from;
        for (uint32_t k = 0; k < n->children.len; k++) {
            if ((rc = place_node(c, first + k, lo, hi, cur, &cur)) != FIT) {
                return rc;
            }
        }
        *finish = cur;
        return FIT;
    }
    case GANTRY_RDL_ALL: {
        uint64_t end = from;
        for (uint32_t k = 0; k < n->children.len; k++) {
            uint64_t f = from;
            if ((rc = place_node(c, first + k, lo, hi, from, &f)) != FIT) {
                return rc;
            }
            end = f > end ? f : end;
        }
        *finish = end;
        return FIT;
    }
    case GANTRY_RDL_ANY: {
        size_t mark = c->self->placed_len;
        for (uint32_t k = 0; k < n->children.len; k++) {
            if ((rc = place_node(c, first + k, lo, hi, from, finish)) != NO_FIT) {
                return rc;
            }
            if (!rollback(c, mark)) {
                return OUT_OF_MEMORY;
            }
        }
        return NO_FIT;
    }
    default:
        return NO_FIT; /* view_ok refused other kinds */
    }
}

/* Plans reservation `r` around what work holds; on NO_FIT nothing of it stays placed. */
static int plan_reservation(Call *c, uint32_t r) {
    const GantryReservationDetail *d = &c->view->reservation_details[r];
    size_t mark = c->self->placed_len;
    c->reservation = r;
    c->reason = EF_REASON_NO_ROOM;
    uint64_t lo = d->arrival_ms > c->view->now_ms ? d->arrival_ms : c->view->now_ms;
    uint64_t finish = lo;
    int rc = place_node(c, d->definition, lo, d->deadline_ms, lo, &finish);
    if (rc == NO_FIT && !rollback(c, mark)) {
        return OUT_OF_MEMORY;
    }
    return rc;
}

/* ADMIT, UPDATE: plan the subject around every other accepted allocation, or reject it. */
static int answer_subject(Call *c) {
    uint32_t s = c->view->reserve_subject;
    if (!build_base(c, NULL, s)) {
        return OUT_OF_MEMORY;
    }
    int rc = plan_reservation(c, s);
    if (rc == OUT_OF_MEMORY) {
        return rc;
    }
    int ok = rc == FIT ? push_decision(c, GANTRY_DECISION_PLAN_RESERVATION, s, 0)
                       : push_decision(c, GANTRY_DECISION_REJECT_RESERVATION, s, c->reason);
    return ok ? FIT : OUT_OF_MEMORY;
}

/* ---- Replanning after the capacity dropped. ---- */

/* Lowest priority first; among equals the newest (latest accepted, then highest index) first. */
static int cmp_candidate(const void *a, const void *b) {
    const Candidate *x = a, *y = b;
    if (x->priority != y->priority) {
        return x->priority < y->priority ? -1 : 1;
    }
    if (x->accepted_ms != y->accepted_ms) {
        return x->accepted_ms > y->accepted_ms ? -1 : 1;
    }
    return x->index > y->index ? -1 : (x->index < y->index);
}

/* Whether what is left when the first `m` candidates are given up fits from now on; -1 if out of
 * memory. */
static int fits_without(Call *c, size_t n, size_t m) {
    EarliestFit *self = c->self;
    memset(self->given_up, 0, (size_t)c->view->reservations_len);
    for (size_t i = 0; i < m && i < n; i++) {
        self->given_up[self->candidates[i].index] = 1;
    }
    if (!build_base(c, self->given_up, GANTRY_NONE)) {
        return -1;
    }
    return profile_fits_from(&self->base, c->view->now_ms, c->view->plan_capacity);
}

static int answer_replan(Call *c) {
    EarliestFit *self = c->self;
    const GantryView *view = c->view;
    size_t r_len = (size_t)view->reservations_len;
    if (!grow((void **)&self->given_up, &self->given_up_cap, r_len + 1, 1) ||
        !grow((void **)&self->candidates, &self->candidates_cap, r_len + 1, sizeof *self->candidates)) {
        return OUT_OF_MEMORY;
    }
    /* Candidates: accepted reservations holding something from now on. */
    size_t n = 0;
    for (size_t r = 0; r < r_len; r++) {
        const GantryReservationDetail *d = &view->reservation_details[r];
        int holds = 0;
        for (uint32_t i = 0; i < d->allocation.len && !holds; i++) {
            holds = view->allocations[d->allocation.start + i].end_ms > view->now_ms;
        }
        if (holds && view->reservations[r].state == GANTRY_RESERVATION_ACCEPTED) {
            self->candidates[n++] = (Candidate){d->priority, d->accepted_ms, (uint32_t)r};
        }
    }
    qsort(self->candidates, n, sizeof *self->candidates, cmp_candidate);
    /* The fewest candidates to give up (giving up more never hurts). */
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int fits = fits_without(c, n, mid);
        if (fits < 0) {
            return OUT_OF_MEMORY;
        }
        if (fits) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    if (fits_without(c, n, lo) < 0) {
        return OUT_OF_MEMORY;
    }
    /* Move what has not started, oldest (most important) first, if it fits around the rest. */
    for (size_t i = lo; i-- > 0;) {
        uint32_t r = self->candidates[i].index;
        const GantryReservationDetail *d = &view->reservation_details[r];
        int started = 0;
        for (uint32_t k = 0; k < d->allocation.len && !started; k++) {
            started = view->allocations[d->allocation.start + k].start_ms < view->now_ms;
        }
        int rc = started ? NO_FIT : plan_reservation(c, r);
        if (rc == OUT_OF_MEMORY) {
            return rc;
        }
        int ok = rc == FIT ? push_decision(c, GANTRY_DECISION_PLAN_RESERVATION, r, 0)
                           : push_decision(c, GANTRY_DECISION_REJECT_RESERVATION, r, EF_REASON_REPLANNED);
        if (!ok) {
            return OUT_OF_MEMORY;
        }
    }
    return FIT;
}

/* ---- Hooks. ---- */

static int32_t ef_create(const char *config, uint64_t config_len, void **instance, GantryOutput *out) {
    /* Any configuration is accepted; this plugin has no settings. */
    (void)config;
    (void)config_len;
    int has_pieces;
    out = checked_output(out, &has_pieces);
    if (instance == NULL) {
        set_message(out, "create: instance pointer is NULL");
        return GANTRY_ERR_INVALID_VIEW;
    }
    EarliestFit *self = calloc(1, sizeof *self);
    if (self == NULL) {
        set_message(out, "create: out of memory");
        return GANTRY_ERR_INTERNAL;
    }
    *instance = self;
    return GANTRY_OK;
}

static void ef_destroy(void *instance) {
    EarliestFit *self = instance;
    if (self == NULL) {
        return;
    }
    free(self->base.segs);
    free(self->work.segs);
    free(self->events);
    free(self->placed);
    free(self->decisions);
    free(self->atom_first);
    free(self->atom_node);
    free(self->given_up);
    free(self->candidates);
    free(self);
}

static int32_t ef_reserve(void *instance, const GantryView *view, GantryOutput *out) {
    int has_pieces;
    out = checked_output(out, &has_pieces);
    if (out == NULL) {
        return GANTRY_ERR_INVALID_VIEW;
    }
    if (!has_pieces) {
        set_message(out, "reserve: the host's output has no allocation fields (older than ABI 1.3)");
        return GANTRY_ERR_INVALID_VIEW;
    }
    if (instance == NULL || view == NULL) {
        set_message(out, "reserve: instance or view pointer is NULL");
        return GANTRY_ERR_INVALID_VIEW;
    }
    EarliestFit *self = instance;
    Call call = {self, view, GANTRY_NONE, 0};
    char message[160];
    int ok = view_ok(&call, message, sizeof message);
    if (ok < 0) {
        set_message(out, "reserve: out of memory");
        return GANTRY_ERR_INTERNAL;
    }
    if (!ok) {
        set_message(out, message);
        return GANTRY_ERR_INVALID_VIEW;
    }
    self->decisions_len = 0;
    self->placed_len = 0;
    int rc = FIT;
    switch (view->reserve_cause) {
    case GANTRY_RESERVE_ADMIT:
    case GANTRY_RESERVE_UPDATE:
        if (view->reserve_subject >= view->reservations_len) {
            set_message(out, "reserve: the subject is not a reservation of the view");
            return GANTRY_ERR_INVALID_VIEW;
        }
        rc = answer_subject(&call);
        break;
    case GANTRY_RESERVE_REPLAN:
        rc = answer_replan(&call);
        break;
    default: /* OPTIMIZE, or a cause of a later minor: no change */
        break;
    }
    if (rc == OUT_OF_MEMORY) {
        set_message(out, "reserve: out of memory");
        return GANTRY_ERR_INTERNAL;
    }

    /* The answer depends on the view alone, so a retry with larger buffers gets the same. */
    uint64_t n = self->decisions_len, m = self->placed_len;
    uint64_t room = out->decisions != NULL ? out->capacity : 0;
    uint64_t pieces_room = out->allocations != NULL ? out->allocations_capacity : 0;
    if (n > room || m > pieces_room) {
        out->needed = n;
        out->allocations_needed = m;
        return GANTRY_BUFFER_FULL;
    }
    if (n > 0) {
        memcpy(out->decisions, self->decisions, n * sizeof *self->decisions);
    }
    for (uint64_t i = 0; i < m; i++) {
        out->allocations[i] = self->placed[i].piece;
    }
    out->len = n;
    out->allocations_len = m;
    return GANTRY_OK;
}

/* ---- Entry symbol. ---- */

static const GantryPluginV1 VTABLE = {
    .struct_size = sizeof(GantryPluginV1),
    .abi_major = GANTRY_ABI_MAJOR,
    .abi_minor = GANTRY_ABI_MINOR,
    .name = "c-earliest-fit",
    .version = "0.1.0",
    .capabilities = GANTRY_CAP_RESERVE,
    .create = ef_create,
    .destroy = ef_destroy,
    .admit = NULL,
    .order = NULL,
    .place = NULL,
    .rebalance = NULL,
    .reserve = ef_reserve,
};

/* A host older than ABI 1.3 cannot call `reserve` (and would refuse its capability bit). */
const GantryPluginV1 *gantry_plugin_v1(uint16_t host_major, uint16_t host_minor) {
    return host_major == GANTRY_ABI_MAJOR && host_minor >= 3 ? &VTABLE : NULL;
}
