// py_argument_types.cpp: the per-type table of what objects offer a pipeline call
// (py_argument_types.h).
#include "python/py_argument_types.h"

#include <string>
#include <unordered_map>

#include "python/py_glue.h"
#include "python/py_halide.h"

namespace hb {
namespace {

/// Types kept at most; all are forgotten when one more comes (a program making classes in a loop
/// must not grow the table without end).
constexpr size_t kTypesKept = 512;

/// The type's version tag, 0 where it has no valid one (then its entry is read every time).
uint32_t version_of(PyTypeObject *type) {
#if PY_VERSION_HEX < 0x030C0000
    if (!PyType_HasFeature(type, Py_TPFLAGS_VALID_VERSION_TAG)) return 0;
#endif
    return type->tp_version_tag;
}

/// The type's attribute `name` as its MRO holds it (a descriptor, not bound to an object), or
/// null.
py::object type_attribute(PyTypeObject *type, const char *name) {
    // Interned: the type's method cache takes interned names (and gives the type a version tag).
    py::object key = py::reinterpret_steal<py::object>(PyUnicode_InternFromString(name));
    if (!key) throw py::error_already_set();
    return py::reinterpret_borrow<py::object>(_PyType_Lookup(type, key.ptr()));
}

/// A pyopencl.array.Array (by its type's module and name: pyopencl need not be imported).
bool is_pyopencl_array_type(PyTypeObject *type) {
    if (std::string(type->tp_name) != "Array") return false;
    py::object module = py::getattr(reinterpret_cast<PyObject *>(type), "__module__", py::none());
    return py::isinstance<py::str>(module) && module.cast<std::string>().rfind("pyopencl", 0) == 0;
}

/// The 1.x exchange API of a type with __dlpack_c_exchange_api__ (walking prev_api past newer
/// majors), or null.
const DLPackExchangeAPI *exchange_api_of(PyTypeObject *type) {
    py::object attr = type_attribute(type, "__dlpack_c_exchange_api__");
    if (!attr || !PyCapsule_IsValid(attr.ptr(), kExchangeAPICapsule)) return nullptr;
    auto *header = static_cast<DLPackExchangeAPIHeader *>(PyCapsule_GetPointer(attr.ptr(), kExchangeAPICapsule));
    while (header && header->version.major > kDLPackMajor) header = header->prev_api;
    if (!header || header->version.major != kDLPackMajor) return nullptr;
    auto *api = reinterpret_cast<const DLPackExchangeAPI *>(header);
    return api->managed_tensor_from_py_object_no_sync ? api : nullptr;
}

ArgumentType read_type(PyTypeObject *type) {
    ArgumentType t;
    auto offer = [&](ArgumentKind k, bool yes) { t.offered |= uint8_t(yes ? 1u << k : 0u); };
    offer(kTypedCapsule, bool(type_attribute(type, "_get_halide_buffer_t_capsule")));
    offer(kHalideBuffer, is_halide_buffer_type(type));
    offer(kPyOpenCLArray, is_pyopencl_array_type(type));
    offer(kDLPack, bool(type_attribute(type, "__dlpack__")));
    offer(kCudaInterface, bool(type_attribute(type, "__cuda_array_interface__")));
    offer(kHostMemory, (type->tp_as_buffer && type->tp_as_buffer->bf_getbuffer) ||
                           bool(type_attribute(type, "__array__")));
    t.ask_each = !t.offered && type->tp_dictoffset != 0;
    if (t.offers(kDLPack)) {
        t.exchange = exchange_api_of(type);
        t.requires_grad = type_attribute(type, "requires_grad");
        t.is_neg = type_attribute(type, "is_neg");
        t.is_conj = type_attribute(type, "is_conj");
    }
    t.version = version_of(type);  // after the lookups, which give a type without one its tag
    return t;
}

/// A C method taking no argument (METH_NOARGS alone among the calling conventions).
bool no_argument_method(PyObject *attr) {
    if (!Py_IS_TYPE(attr, &PyMethodDescr_Type)) return false;
    int flags = reinterpret_cast<PyMethodDescrObject *>(attr)->d_method->ml_flags;
    return (flags & (METH_VARARGS | METH_KEYWORDS | METH_NOARGS | METH_O | METH_FASTCALL | METH_METHOD)) == METH_NOARGS;
}

/// Whether `entry`, read of `type`, still says what the type offers.
bool current(const ArgumentType &entry, PyTypeObject *type) {
    return entry.version != 0 && entry.version == version_of(type);
}

}  // namespace

const ArgumentType &argument_type(PyTypeObject *type) {
    // Never destroyed: it holds Python objects, and the interpreter may be gone at exit. Read and
    // written with the GIL. The entry last asked for is remembered (a call's arguments are mostly
    // of one type): its node stays put until the table is cleared.
    static auto *table = new std::unordered_map<PyTypeObject *, ArgumentType>();
    static std::pair<PyTypeObject *, ArgumentType *> last{nullptr, nullptr};
    if (last.first == type && current(*last.second, type)) return *last.second;
    auto found = table->find(type);
    if (found != table->end() && current(found->second, type)) {
        last = {type, &found->second};
        return found->second;
    }
    // Reading may run Python code (a metaclass's attribute), which may call a pipeline and change
    // the table: it is looked at again after.
    ArgumentType read = read_type(type);
    found = table->find(type);
    if (found == table->end()) {
        if (table->size() >= kTypesKept) {
            for (auto &kept : *table) Py_DECREF(reinterpret_cast<PyObject *>(kept.first));
            table->clear();
        }
        Py_INCREF(reinterpret_cast<PyObject *>(type));  // its address names it for as long as it is kept
        found = table->emplace(type, std::move(read)).first;
    } else {
        found->second = std::move(read);
    }
    last = {type, &found->second};
    return found->second;
}

bool type_attribute_true(py::handle obj, const py::object &attr, PyObject *name, bool method) {
    if (!attr) return false;
    PyObject *value;
    if (Py_IS_TYPE(attr.ptr(), &PyGetSetDescr_Type) && reinterpret_cast<PyGetSetDescrObject *>(attr.ptr())->d_getset->get) {
        PyGetSetDef *def = reinterpret_cast<PyGetSetDescrObject *>(attr.ptr())->d_getset;
        value = def->get(obj.ptr(), def->closure);
    } else if (method && no_argument_method(attr.ptr())) {
        value = reinterpret_cast<PyMethodDescrObject *>(attr.ptr())->d_method->ml_meth(obj.ptr(), nullptr);
    } else {
        value = method ? PyObject_CallMethodNoArgs(obj.ptr(), name) : PyObject_GetAttr(obj.ptr(), name);
    }
    if (!value) {
        PyErr_Clear();
        return false;
    }
    int truth = PyObject_IsTrue(value);
    Py_DECREF(value);
    if (truth < 0) PyErr_Clear();
    return truth == 1;
}

}  // namespace hb
