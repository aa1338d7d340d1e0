import CTokendShims
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The shipped tokend links the Swift runtime statically, where `dlsym` cannot find the
/// runtime's enqueue hook, so ``ConcurrencyExecutor`` installs it through the address the
/// linker resolved. In this (dynamically linked) test binary both lookups work: they must name
/// the same variable, or the shim would install a hook the runtime never calls.
@Suite struct ConcurrencyExecutorTests {
    @Test func theLinkedHookIsTheVariableTheRuntimeExports() throws {
        let linked = try #require(tokend_swift_enqueue_global_hook_address())
        let exported = try #require(dlsym(dlopen(nil, RTLD_NOW), "swift_task_enqueueGlobal_hook"))
        #expect(UnsafeRawPointer(exported) == linked)
    }
}
