/*
 * The one entry point every fuzz target defines (libFuzzer's contract), and
 * that fuzz/driver.c calls when the targets run as ordinary ctest tests.
 */
#ifndef FEED_FUZZ_FUZZ_H
#define FEED_FUZZ_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/* Runs one input; returns 0. Any bug shows up as a sanitizer report or abort(). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
