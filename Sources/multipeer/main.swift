print("multipeer: not built yet")
