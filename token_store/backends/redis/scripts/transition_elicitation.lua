-- After transition.lua. KEYS[2]: the live set, declared on Cluster only.
return transition(2)
