// pybind11 bindings of promem_fast._native: argument checking, GIL release, numpy results.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "native.hpp"

namespace py = pybind11;

namespace {

// A validated 1-D, C-contiguous int64 input; `array` keeps the buffer alive while the GIL is released.
struct Int64View {
    py::array array;
    const std::int64_t* data = nullptr;
    std::size_t size = 0;
};

std::string type_name(py::handle obj) { return py::str(py::type::handle_of(obj).attr("__name__")); }

py::array require_1d_array(py::handle obj, const char* func, const char* name) {
    if (!py::isinstance<py::array>(obj)) {
        throw py::value_error(std::string(func) + ": argument '" + name + "' must be a numpy array, got " +
                              type_name(obj));
    }
    py::array arr = py::reinterpret_borrow<py::array>(obj);
    if (arr.ndim() != 1) {
        throw py::value_error(std::string(func) + ": argument '" + name + "' must be 1-D, got ndim=" +
                              std::to_string(arr.ndim()));
    }
    if (!(arr.flags() & py::array::c_style)) {
        throw py::value_error(std::string(func) + ": argument '" + name + "' must be C-contiguous");
    }
    return arr;
}

Int64View require_int64(py::handle obj, const char* func, const char* name) {
    py::array arr = require_1d_array(obj, func, name);
    if (!py::isinstance<py::array_t<std::int64_t>>(arr)) {
        throw py::value_error(std::string(func) + ": argument '" + name + "' must have dtype int64, got " +
                              std::string(py::str(arr.dtype())) +
                              " (the promem_fast.native wrapper converts integer arrays)");
    }
    Int64View v;
    v.size = static_cast<std::size_t>(arr.shape(0));
    v.data = static_cast<const std::int64_t*>(arr.data());
    v.array = std::move(arr);
    return v;
}

void require_same_length(const Int64View& a, const char* a_name, const Int64View& b, const char* b_name,
                         const char* func) {
    if (a.size != b.size) {
        throw py::value_error(std::string(func) + ": arguments '" + a_name + "' and '" + b_name +
                              "' must have the same length, got " + std::to_string(a.size) + " and " +
                              std::to_string(b.size));
    }
}

// Hands a vector's buffer to numpy without copying; the capsule frees it with the array.
py::array_t<std::int64_t> to_numpy(std::vector<std::int64_t>&& values) {
    if (values.empty()) return py::array_t<std::int64_t>(0);
    auto owned = std::make_unique<std::vector<std::int64_t>>(std::move(values));
    std::vector<std::int64_t>* raw = owned.get();
    py::capsule owner(raw, [](void* p) { delete static_cast<std::vector<std::int64_t>*>(p); });
    owned.release();
    const py::ssize_t n = static_cast<py::ssize_t>(raw->size());
    return py::array_t<std::int64_t>({n}, {static_cast<py::ssize_t>(sizeof(std::int64_t))}, raw->data(), owner);
}

py::tuple anchor_details_py(py::handle detail_session, py::handle detail_turn, py::handle entry_session,
                            py::handle entry_turn) {
    constexpr const char* fn = "anchor_details";
    const Int64View ds = require_int64(detail_session, fn, "detail_session");
    const Int64View dt = require_int64(detail_turn, fn, "detail_turn");
    const Int64View es = require_int64(entry_session, fn, "entry_session");
    const Int64View et = require_int64(entry_turn, fn, "entry_turn");
    require_same_length(ds, "detail_session", dt, "detail_turn", fn);
    require_same_length(es, "entry_session", et, "entry_turn", fn);

    promem::AnchorResult res;
    {
        py::gil_scoped_release nogil;
        res = promem::anchor_details(ds.data, dt.data, ds.size, es.data, et.data, es.size);
    }
    py::array_t<std::int64_t> offsets = to_numpy(std::move(res.offsets));
    py::array_t<std::int64_t> indices = to_numpy(std::move(res.indices));
    return py::make_tuple(std::move(offsets), std::move(indices));
}

py::array_t<std::int64_t> clean_edges_py(py::handle session, py::handle source, py::handle relation,
                                         py::handle target, py::object symmetric) {
    constexpr const char* fn = "clean_edges";
    const Int64View s = require_int64(session, fn, "session");
    const Int64View a = require_int64(source, fn, "source");
    const Int64View r = require_int64(relation, fn, "relation");
    const Int64View b = require_int64(target, fn, "target");
    require_same_length(s, "session", a, "source", fn);
    require_same_length(s, "session", r, "relation", fn);
    require_same_length(s, "session", b, "target", fn);

    py::array sym_array;
    const std::uint8_t* sym = nullptr;
    std::int64_t n_relations = -1;
    if (!symmetric.is_none()) {
        sym_array = require_1d_array(symmetric, fn, "symmetric");
        if (!py::isinstance<py::array_t<bool>>(sym_array) && !py::isinstance<py::array_t<std::uint8_t>>(sym_array)) {
            throw py::value_error(std::string(fn) + ": argument 'symmetric' must have dtype bool or uint8, got " +
                                  std::string(py::str(sym_array.dtype())));
        }
        sym = static_cast<const std::uint8_t*>(sym_array.data());
        n_relations = static_cast<std::int64_t>(sym_array.shape(0));
    }

    promem::RelationCheck check;
    std::vector<std::int64_t> kept;
    {
        py::gil_scoped_release nogil;
        check = promem::check_relations(r.data, r.size, n_relations);
        if (check.ok) kept = promem::clean_edges(s.data, a.data, r.data, b.data, s.size, sym);
    }
    if (!check.ok) {
        std::string msg = std::string(fn) + ": argument 'relation' has id " + std::to_string(check.relation) +
                          " at edge " + std::to_string(check.edge);
        if (check.relation < 0) {
            msg += "; relation ids must be >= 0";
        } else {
            msg += "; it is out of range for 'symmetric' (length " + std::to_string(n_relations) + ")";
        }
        throw py::value_error(msg);
    }
    return to_numpy(std::move(kept));
}

}  // namespace

PYBIND11_MODULE(_native, m) {
    m.doc() = "Native core of promem_fast: detail anchoring and edge cleaning on int64 arrays.";

    m.def("anchor_details", &anchor_details_py, py::arg("detail_session"), py::arg("detail_turn"),
          py::arg("entry_session"), py::arg("entry_turn"),
          "Details anchored to each entry by shared (session, turn), as CSR (offsets, indices).\n\n"
          "All inputs are 1-D C-contiguous int64 arrays. Negative turns are never matched.");

    m.def("clean_edges", &clean_edges_py, py::arg("session"), py::arg("source"), py::arg("relation"),
          py::arg("target"), py::arg("symmetric") = py::none(),
          "Ascending indices of the edges to keep: no self-loops, no negative endpoints, no duplicates.\n\n"
          "Inputs are 1-D C-contiguous int64 arrays; 'symmetric' is an optional bool/uint8 array by relation id.");
}
