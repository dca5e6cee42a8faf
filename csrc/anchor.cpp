// Detail anchoring: group details by (session, turn) with one hash table, then read each entry's group.
//
// Details are scanned as runs: maximal stretches of consecutive grounded details that share a key.
// Details normally arrive in extraction order (by session, then turn), so a key is one run (or a few,
// when ungrounded details sit in between) and the table sees one lookup per turn rather than one per
// detail. A group is kept as a chain of its runs in input order, so an entry's details are written as
// whole index ranges, already ascending. The table slots of runs a few steps ahead are prefetched to
// overlap cache misses.
#include "native.hpp"

namespace promem {

namespace {

inline void prefetch(const void* p) {
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(p);
#else
    (void)p;
#endif
}

// How many runs (or entries) ahead to prefetch table slots.
constexpr std::size_t kLookahead = 8;

struct Group {
    std::int64_t session;
    std::int64_t turn;
    std::int64_t count;      // details in the group
    std::int64_t first_run;  // head of the chain of runs
    std::int64_t last_run;   // tail, where the next run is linked
};

struct Run {
    std::int64_t start;
    std::int64_t length;
    std::int64_t next;  // next run of the same group, -1 at the end
};

// Open-addressing map from a (session, turn) key to a dense group id; linear probing over slots that
// hold the hash and the id, keys stored once per group. Sized once from an upper bound on the keys.
class KeyGroups {
public:
    explicit KeyGroups(std::size_t bound) : mask_(detail::table_capacity(bound) - 1), slots_(mask_ + 1) {
        groups_.reserve(bound);
    }

    // Group id of the key; a new group (id == size() before the call) when the key is unseen.
    std::int64_t get_or_add(std::int64_t session, std::int64_t turn) {
        const std::uint64_t h = hash(session, turn);
        std::size_t pos = static_cast<std::size_t>(h) & mask_;
        while (true) {
            Slot& s = slots_[pos];
            if (s.group < 0) {
                s.hash = h;
                s.group = static_cast<std::int64_t>(groups_.size());
                groups_.push_back(Group{session, turn, 0, -1, -1});
                return s.group;
            }
            if (s.hash == h && matches(s.group, session, turn)) return s.group;
            pos = (pos + 1) & mask_;
        }
    }

    // Group id of the key, or -1 when no detail has it.
    std::int64_t find(std::int64_t session, std::int64_t turn) const {
        const std::uint64_t h = hash(session, turn);
        std::size_t pos = static_cast<std::size_t>(h) & mask_;
        while (true) {
            const Slot& s = slots_[pos];
            if (s.group < 0) return -1;
            if (s.hash == h && matches(s.group, session, turn)) return s.group;
            pos = (pos + 1) & mask_;
        }
    }

    void prefetch_key(std::int64_t session, std::int64_t turn) const {
        prefetch(&slots_[static_cast<std::size_t>(hash(session, turn)) & mask_]);
    }

    Group& group(std::int64_t g) { return groups_[static_cast<std::size_t>(g)]; }
    const Group& group(std::int64_t g) const { return groups_[static_cast<std::size_t>(g)]; }

private:
    struct Slot {
        std::uint64_t hash = 0;
        std::int64_t group = -1;
    };

    static std::uint64_t hash(std::int64_t session, std::int64_t turn) {
        return detail::hash_combine(detail::mix64(static_cast<std::uint64_t>(session)), turn);
    }

    bool matches(std::int64_t g, std::int64_t session, std::int64_t turn) const {
        const Group& grp = groups_[static_cast<std::size_t>(g)];
        return grp.session == session && grp.turn == turn;
    }

    std::size_t mask_;
    std::vector<Slot> slots_;
    std::vector<Group> groups_;
};

// Walks the runs of grounded details: [start, start + length) all share (session, turn), turn >= 0.
class RunScanner {
public:
    RunScanner(const std::int64_t* session, const std::int64_t* turn, std::size_t n)
        : session_(session), turn_(turn), n_(n) {}

    bool next(std::size_t& start, std::size_t& length) {
        while (pos_ < n_ && turn_[pos_] < 0) ++pos_;
        if (pos_ == n_) return false;
        start = pos_;
        const std::int64_t s = session_[pos_];
        const std::int64_t t = turn_[pos_];
        ++pos_;
        while (pos_ < n_ && turn_[pos_] == t && session_[pos_] == s) ++pos_;
        length = pos_ - start;
        return true;
    }

private:
    const std::int64_t* session_;
    const std::int64_t* turn_;
    std::size_t n_;
    std::size_t pos_ = 0;
};

}  // namespace

AnchorResult anchor_details(const std::int64_t* detail_session, const std::int64_t* detail_turn, std::size_t n,
                            const std::int64_t* entry_session, const std::int64_t* entry_turn, std::size_t m) {
    AnchorResult out;
    out.offsets.assign(m + 1, 0);
    if (n == 0 || m == 0) return out;

    // The run count bounds the number of distinct keys, so the table never has to grow.
    std::size_t n_runs = 0;
    {
        RunScanner scan(detail_session, detail_turn, n);
        std::size_t start = 0, length = 0;
        while (scan.next(start, length)) ++n_runs;
    }
    if (n_runs == 0) return out;

    // Pass 1: every run joins the chain of its key's group.
    KeyGroups groups(n_runs);
    std::vector<Run> runs;
    runs.reserve(n_runs);
    {
        RunScanner scan(detail_session, detail_turn, n);
        RunScanner ahead(detail_session, detail_turn, n);
        std::size_t start = 0, length = 0;
        for (std::size_t k = 0; k < kLookahead && ahead.next(start, length); ++k) {
            groups.prefetch_key(detail_session[start], detail_turn[start]);
        }
        while (scan.next(start, length)) {
            std::size_t a_start = 0, a_length = 0;
            if (ahead.next(a_start, a_length)) groups.prefetch_key(detail_session[a_start], detail_turn[a_start]);
            const std::int64_t r = static_cast<std::int64_t>(runs.size());
            runs.push_back(Run{static_cast<std::int64_t>(start), static_cast<std::int64_t>(length), -1});
            Group& g = groups.group(groups.get_or_add(detail_session[start], detail_turn[start]));
            if (g.last_run < 0) {
                g.first_run = r;
            } else {
                runs[static_cast<std::size_t>(g.last_run)].next = r;
            }
            g.last_run = r;
            g.count += static_cast<std::int64_t>(length);
        }
    }

    // Pass 2: each entry's group and the output offsets.
    std::vector<std::int64_t> entry_group(m, -1);
    for (std::size_t j = 0; j < m; ++j) {
        if (j + kLookahead < m && entry_turn[j + kLookahead] >= 0) {
            groups.prefetch_key(entry_session[j + kLookahead], entry_turn[j + kLookahead]);
        }
        std::int64_t count = 0;
        if (entry_turn[j] >= 0) {
            const std::int64_t g = groups.find(entry_session[j], entry_turn[j]);
            entry_group[j] = g;
            if (g >= 0) count = groups.group(g).count;
        }
        out.offsets[j + 1] = out.offsets[j] + count;
    }

    // Pass 3: write each entry's details, run by run along its group's chain.
    out.indices.resize(static_cast<std::size_t>(out.offsets[m]));
    for (std::size_t j = 0; j < m; ++j) {
        const std::int64_t g = entry_group[j];
        if (g < 0) continue;
        std::int64_t* dst = out.indices.data() + out.offsets[j];
        for (std::int64_t r = groups.group(g).first_run; r >= 0; r = runs[static_cast<std::size_t>(r)].next) {
            const Run& run = runs[static_cast<std::size_t>(r)];
            for (std::int64_t q = 0; q < run.length; ++q) *dst++ = run.start + q;
        }
    }
    return out;
}

}  // namespace promem
