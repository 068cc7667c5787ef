print(0.5)
