print("cost tables: coming")
