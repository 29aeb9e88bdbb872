// harness.h: the C++ test program's own harness. A case is a function registered by name
// (TEST_CASE); a check that does not hold throws a Failure naming the file, the line and what
// differed, which ends that case alone. test_main.cpp runs the cases by name.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace hb_test {

/// A check that did not hold: the case stops here (test_main.cpp reports it).
struct Failure {
    std::string what;
};

[[noreturn]] void fail(const char *file, int line, const std::string &what);

struct Case {
    const char *name;
    void (*run)();
};
/// Every case, in the order their files registered them.
std::vector<Case> &cases();
struct Registration {
    Registration(const char *name, void (*run)()) { cases().push_back(Case{name, run}); }
};

/// The options test_main.cpp was given that some cases need.
struct Options {
    std::string pipelines;  ///< --pipelines: the pipeline library the call plan's cases load
};
Options &options();

/// A value as a message shows it: numbers and text as they are, sequences as (a, b, c).
template <typename T>
std::string text(const T &value) {
    std::ostringstream out;
    if constexpr (std::is_convertible_v<const T &, std::string>) {
        out << '\'' << std::string(value) << '\'';
    } else if constexpr (std::is_same_v<T, uint8_t> || std::is_same_v<T, int8_t>) {
        out << int(value);
    } else if constexpr (std::is_pointer_v<T>) {
        out << static_cast<const void *>(value);
    } else if constexpr (std::is_enum_v<T>) {
        out << int64_t(value);
    } else if constexpr (std::is_arithmetic_v<T>) {
        out << value;
    } else {
        out << '(';
        const char *separator = "";
        for (const auto &item : value) {
            out << separator << text(item);
            separator = ", ";
        }
        out << ')';
    }
    return out.str();
}

template <typename A, typename B>
void check_equal(const A &a, const B &b, const char *a_text, const char *b_text, const char *file, int line) {
    if (!(a == b)) fail(file, line, std::string(a_text) + " == " + b_text + ": " + text(a) + " != " + text(b));
}

/// Runs `f`; a check failing inside says `context` too (which of many generated inputs it was).
template <typename F>
void within(const std::string &context, F &&f) {
    try {
        f();
    } catch (Failure &failure) {
        failure.what += "\n  with " + context;
        throw;
    }
}

/// The exception of type E (or derived from it) `f` throws; a failure when it throws none.
template <typename E, typename F>
E caught(F &&f, const char *type, const char *statement, const char *file, int line) {
    try {
        f();
    } catch (const E &e) {
        return e;
    }
    fail(file, line, std::string(statement) + " threw no " + type);
}

/// An expected exception's message must contain `fragment`.
void check_message(const char *what, const std::string &fragment, const char *file, int line);

}  // namespace hb_test

/// Defines and registers a case: TEST_CASE(name) { ...checks... }
#define TEST_CASE(name)                                                         \
    static void name();                                                         \
    static const ::hb_test::Registration name##_registration(#name, &name);     \
    static void name()

#define CHECK(condition)                                                        \
    do {                                                                        \
        if (!(condition)) ::hb_test::fail(__FILE__, __LINE__, #condition);      \
    } while (0)

#define CHECK_EQ(a, b) ::hb_test::check_equal((a), (b), #a, #b, __FILE__, __LINE__)

/// The exception of `Type` (or derived from it) that `statement` throws, for more checks.
#define CAUGHT(Type, statement) ::hb_test::caught<Type>([&] { statement; }, #Type, #statement, __FILE__, __LINE__)

/// `statement` must throw `Type` (or a type derived from it) whose message contains `fragment`.
#define CHECK_THROWS(Type, statement, fragment) \
    ::hb_test::check_message(CAUGHT(Type, statement).what(), fragment, __FILE__, __LINE__)
