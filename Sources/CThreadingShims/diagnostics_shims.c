// Storage for the diagnostics switches (see include/tk_diagnostics_shims.h).
#include "tk_diagnostics_shims.h"

uint32_t tk_diagnostics_switches_word = 0;
uint64_t tk_diagnostics_option_words[8] = {0};
