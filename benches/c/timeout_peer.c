/*
 * C's timeout.c (William Ahern's hierarchical wheel, github.com/wahern/timeout) behind the
 * runner's `Timers` trait (benches/src/peers/timeout_c.rs), built only when TICKWHEEL_TIMEOUT_C
 * names a checkout of it (benches/build.rs).
 *
 * Model: as timeout.c's own harness and its embedders hold timers, the nodes sit in one array
 * reserved up front (2^24 of them), initialised before the clock starts for as many timers as the
 * workload will arm (tp_prepare: a C program's nodes live in objects that exist before their
 * timers), and the caller names a node by its index. Each node carries a generation so a stale
 * id (one that fired, was cancelled, or whose node was reused) is refused rather than cancelling
 * somebody else's timer: the same promise tickwheel's handle keeps, at the cost of one compare.
 * Free nodes form a list through `next_free`. Deadlines are absolute ticks (TIMEOUT_ABS); the
 * library is built without callbacks, intervals or the back pointer to the wheel, which the runner
 * does not use, so its node is as small as it gets (40 bytes, 56 with the value, generation and
 * free link).
 */
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>

#include "timeout.h"

#define PEER_CAPACITY (UINT32_C(1) << 24)

struct node {
	struct timeout to; /* first, so a `struct timeout *` from the library is the node */
	uint64_t value;
	uint32_t generation;
	uint32_t next_free;
};

struct peer {
	struct timeouts *wheel;
	struct node *nodes;
	uint32_t used;      /* nodes ever handed out; those past it are untouched */
	uint32_t free_head; /* PEER_CAPACITY when the free list is empty */
	uint64_t len;
	uint64_t now;
};

static uint64_t id_of(uint32_t index, uint32_t generation) {
	return ((uint64_t)generation << 32) | index;
}

/* The node `id` names while it is armed, or NULL. */
static struct node *armed(struct peer *p, uint64_t id) {
	uint32_t index = (uint32_t)id;
	if (index >= p->used)
		return NULL;
	struct node *n = &p->nodes[index];
	if (n->generation != (uint32_t)(id >> 32) || n->to.pending == NULL)
		return NULL;
	return n;
}

/* Ends `n`'s life as a timer: a later id for it gets a new generation. */
static void release(struct peer *p, struct node *n) {
	n->generation++;
	n->next_free = p->free_head;
	p->free_head = (uint32_t)(n - p->nodes);
	p->len--;
}

struct peer *tp_open(void) {
	struct peer *p = calloc(1, sizeof *p);
	if (p == NULL)
		return NULL;
	int error = 0;
	p->wheel = timeouts_open(TIMEOUT_mHZ, &error);
	p->nodes = calloc(PEER_CAPACITY, sizeof *p->nodes);
	if (p->wheel == NULL || p->nodes == NULL) {
		if (p->wheel != NULL)
			timeouts_close(p->wheel);
		free(p->nodes);
		free(p);
		return NULL;
	}
	p->free_head = PEER_CAPACITY;
	return p;
}

/* Initialises the first `n` nodes, as a C program's connection objects (which hold the nodes)
 * exist before their timers are armed: the runner calls this before any clock starts, so the
 * peer's measured inserts do not fault in its nodes' pages. */
void tp_prepare(struct peer *p, uint64_t n) {
	for (uint64_t i = 0; i < n && i < PEER_CAPACITY; i++)
		timeout_init(&p->nodes[i].to, TIMEOUT_ABS);
}

void tp_close(struct peer *p) {
	timeouts_close(p->wheel);
	free(p->nodes);
	free(p);
}

uint64_t tp_insert(struct peer *p, uint64_t deadline, uint64_t value) {
	uint32_t index;
	if (p->free_head != PEER_CAPACITY) {
		index = p->free_head;
		p->free_head = p->nodes[index].next_free;
	} else if (p->used < PEER_CAPACITY) {
		index = p->used++;
	} else {
		fprintf(stderr, "timeout_peer: more than %u timers\n", PEER_CAPACITY);
		abort();
	}
	struct node *n = &p->nodes[index];
	timeout_init(&n->to, TIMEOUT_ABS);
	n->value = value;
	timeouts_add(p->wheel, &n->to, deadline);
	p->len++;
	return id_of(index, n->generation);
}

/* 1 and the value in *value if `id` was armed, 0 if not. */
int tp_cancel(struct peer *p, uint64_t id, uint64_t *value) {
	struct node *n = armed(p, id);
	if (n == NULL)
		return 0;
	timeouts_del(p->wheel, &n->to);
	*value = n->value;
	release(p, n);
	return 1;
}

/* 1 if `id` was armed and now expires at `deadline`, 0 if it was not armed. */
int tp_reset(struct peer *p, uint64_t id, uint64_t deadline) {
	struct node *n = armed(p, id);
	if (n == NULL)
		return 0;
	timeouts_add(p->wheel, &n->to, deadline); /* unlinks it first */
	return 1;
}

/* Moves the clock to `now`; what came due is then taken one at a time with tp_next_fired. */
void tp_update(struct peer *p, uint64_t now) {
	timeouts_update(p->wheel, now);
	p->now = now;
}

/* 1 and a fired timer's value in *value, or 0 when none is left. */
int tp_next_fired(struct peer *p, uint64_t *value) {
	struct timeout *to = timeouts_get(p->wheel);
	if (to == NULL)
		return 0;
	struct node *n = (struct node *)to;
	*value = n->value;
	release(p, n);
	return 1;
}

/* The earliest tick anything may fire at, later than the clock, or 0 when nothing is armed. */
uint64_t tp_next_expiry(struct peer *p) {
	if (p->len == 0)
		return 0;
	timeout_t wait = timeouts_timeout(p->wheel);
	if (wait == ~(timeout_t)0)
		return 0;
	return p->now + (wait == 0 ? 1 : wait);
}

uint64_t tp_len(const struct peer *p) {
	return p->len;
}
