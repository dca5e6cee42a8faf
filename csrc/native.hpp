// Native core of promem_fast: turn-id detail anchoring and edge cleaning on int64 arrays.
//
// The kernels below work on raw pointers and std::vector only, so they can run with the
// Python GIL released. module.cpp validates the numpy inputs and wraps the results.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace promem {

// CSR result of anchor_details: entry j owns indices[offsets[j] .. offsets[j+1]).
struct AnchorResult {
    std::vector<std::int64_t> offsets;
    std::vector<std::int64_t> indices;
};

// For every entry j, the ascending indices i of the details whose (session, turn) equals the
// entry's. Details or entries with a negative turn are never matched. Expected O(n + m + output).
AnchorResult anchor_details(const std::int64_t* detail_session, const std::int64_t* detail_turn, std::size_t n,
                            const std::int64_t* entry_session, const std::int64_t* entry_turn, std::size_t m);

// Outcome of the relation-id check that clean_edges runs before any work.
struct RelationCheck {
    bool ok = true;
    std::size_t edge = 0;         // index of the first bad edge
    std::int64_t relation = 0;    // its relation id
};

// First edge whose relation id is negative, or >= n_relations when n_relations >= 0.
// A negative n_relations means "no upper bound" (no symmetric table given).
RelationCheck check_relations(const std::int64_t* relation, std::size_t e, std::int64_t n_relations);

// Ascending indices of the edges to keep: no self-loops, no negative endpoints, and only the
// first occurrence of each (session, source, relation, target). When symmetric is non-null,
// symmetric[r] != 0 makes (s, a, r, b) and (s, b, r, a) the same edge. Relation ids must have
// been checked with check_relations first. Expected O(e).
std::vector<std::int64_t> clean_edges(const std::int64_t* session, const std::int64_t* source,
                                      const std::int64_t* relation, const std::int64_t* target, std::size_t e,
                                      const std::uint8_t* symmetric);

namespace detail {

// splitmix64 finaliser: a cheap, well-mixed 64-bit hash step.
inline std::uint64_t mix64(std::uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

inline std::uint64_t hash_combine(std::uint64_t h, std::int64_t v) {
    return mix64(h ^ static_cast<std::uint64_t>(v));
}

// Smallest power of two >= max(16, 2 * count): keeps linear probing under half full.
inline std::size_t table_capacity(std::size_t count) {
    std::size_t cap = 16;
    while (cap < 2 * count) cap <<= 1;
    return cap;
}

}  // namespace detail

}  // namespace promem
