@main struct MDNSFuzzMain { static func main() {} }
