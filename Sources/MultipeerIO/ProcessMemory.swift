internal import Glibc

/// This process's memory, for benchmarks and for tests that bound what a hostile peer can make us hold.
package enum ProcessMemory {
    /// Bytes allocated by malloc and not freed: `uordblks + hblkhd` of glibc's `mallinfo2()`, or nil where it is
    /// not available.
    ///
    /// `malloc.h` is not part of Swift's Glibc module, so `mallinfo2` is looked up with `dlsym`. It returns a
    /// 10 × `size_t` struct, which the x86-64 System V ABI returns through a hidden pointer passed as the first
    /// argument; calling it as `(UnsafeMutableRawPointer) -> UnsafeMutableRawPointer` with an 80-byte buffer is
    /// therefore exact there. Elsewhere this returns nil.
    /// Under the thread or address sanitizer, whose allocator replaces malloc and leaves `mallinfo2` at zero, it
    /// is nil too.
    package static func heapInUse() -> Int? {
        #if arch(x86_64)
            guard !underSanitizer else { return nil }
            typealias Function = @convention(c) (UnsafeMutableRawPointer) -> UnsafeMutableRawPointer?
            guard let symbol = dlsym(dlopen(nil, RTLD_NOW), "mallinfo2") else { return nil }
            let mallinfo2 = unsafeBitCast(symbol, to: Function.self)
            var fields = [Int](repeating: 0, count: 10)
            fields.withUnsafeMutableBytes { _ = mallinfo2($0.baseAddress!) }
            // arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks, uordblks, fordblks, keepcost
            return fields[7] + fields[4]
        #else
            return nil
        #endif
    }

    /// Whether a sanitizer's runtime (thread or address) is in this process: its allocator replaces malloc's.
    package static let underSanitizer: Bool = {
        let process = dlopen(nil, RTLD_NOW)
        return dlsym(process, "__tsan_init") != nil || dlsym(process, "__asan_init") != nil
    }()

    /// The resident set size from `/proc/self/statm` (its second field, in pages).
    package static func residentBytes() -> Int {
        let descriptor = open("/proc/self/statm", O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return 0 }
        defer { close(descriptor) }
        var buffer = [UInt8](repeating: 0, count: 128)
        let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
        guard count > 0 else { return 0 }
        let fields = buffer[..<count].split(separator: 0x20)
        guard fields.count > 1, let pages = Int(String(decoding: fields[1], as: UTF8.self)) else { return 0 }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }

    /// Open file descriptors of this process (entries of `/proc/self/fd`, less the one listing it).
    package static func openDescriptors() -> Int {
        guard let directory = opendir("/proc/self/fd") else { return -1 }
        defer { closedir(directory) }
        var count = 0
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { Array($0.prefix(while: { $0 != 0 })) }
            if name != [0x2E] && name != [0x2E, 0x2E] { count += 1 }
        }
        return count - 1
    }
}
