/*
 * An intrusive doubly linked list: the node lives inside the element
 * (FEED_LIST_ENTRY gets the element back), so linking allocates nothing and
 * an element can leave the middle of a list in O(1). All zeros is an empty
 * list and an unlinked node, so lists and nodes inside calloc'd or
 * `= {0}`-initialised structs need no init call.
 *
 * No locking: the owner of the list says which lock guards it. A node is in
 * at most one list at a time; remove it before linking it elsewhere.
 */
#ifndef FEED_LIST_H
#define FEED_LIST_H

#include <stdbool.h>
#include <stddef.h>

typedef struct feed_list_node {
    struct feed_list_node *prev, *next;
} feed_list_node;

typedef struct feed_list {
    feed_list_node *first, *last;
} feed_list;

#define FEED_LIST_ENTRY(node, type, member)                                                        \
    ((type *)(void *)((char *)(node)-offsetof(type, member)))

static inline bool feed_list_empty(const feed_list *l)
{
    return l->first == NULL;
}

/* Link n before at (at in l; NULL: at the end). */
static inline void feed_list_insert_before(feed_list *l, feed_list_node *at, feed_list_node *n)
{
    n->next = at;
    n->prev = at ? at->prev : l->last;
    if (n->prev)
        n->prev->next = n;
    else
        l->first = n;
    if (at)
        at->prev = n;
    else
        l->last = n;
}

static inline void feed_list_push_back(feed_list *l, feed_list_node *n)
{
    feed_list_insert_before(l, NULL, n);
}

static inline void feed_list_push_front(feed_list *l, feed_list_node *n)
{
    feed_list_insert_before(l, l->first, n);
}

/* Unlink n (in l); n is left unlinked. */
static inline void feed_list_remove(feed_list *l, feed_list_node *n)
{
    if (n->prev)
        n->prev->next = n->next;
    else
        l->first = n->next;
    if (n->next)
        n->next->prev = n->prev;
    else
        l->last = n->prev;
    n->prev = n->next = NULL;
}

/* The first node, unlinked, or NULL when l is empty. */
static inline feed_list_node *feed_list_pop_front(feed_list *l)
{
    feed_list_node *n = l->first;
    if (n)
        feed_list_remove(l, n);
    return n;
}

/* The node after n, going round to the first after the last. */
static inline feed_list_node *feed_list_next_cyclic(const feed_list *l, const feed_list_node *n)
{
    return n->next ? n->next : l->first;
}

#endif
