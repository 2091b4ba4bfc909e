// Empty: `import MultipeerConnectivity.MCNearbyServiceAdvertiser` brings the Swift module MultipeerConnectivity, which declares it.
