import Testing
@testable import Threads
