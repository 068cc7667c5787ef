def value():
    return 1
